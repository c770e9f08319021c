#pragma once
// What the engine can do with a GGUF tensor (the seam between GgufFile and the parameter loader).
#include <cstdint>
#include <string_view>
#include <vector>

#include "weights/gguf.h"

namespace fuselm::weights {

/// The ggml types the engine holds as they are: F32, F16, BF16 (plain) and Q8_0, Q4_0, Q4_1,
/// Q4_K, Q5_K, Q6_K (blocks, kernels/cpu/quant.h).
bool gguf_type_supported(uint32_t ggml_type);
/// Whether the type is one of the block-quantized ones above.
bool gguf_type_quantized(uint32_t ggml_type);

/// Throws WeightsError, one line naming the file, the tensor and its type, when the engine cannot
/// hold tensor `t`'s type (IQ*, Q2_K, Q3_K, ...), listing the supported ones.
void check_gguf_type_supported(const GgufFile& f, const GgufTensor& t);

/// The row order that undoes llama.cpp's q/k permutation (convert_hf_to_gguf.py's
/// LlamaModel.permute, which reorders each head's rows from rotate-half pairs (i, i + d/2) to
/// adjacent pairs (2i, 2i+1) for ggml's interleaved rope): HF row r is GGUF row result[r].
/// Rows move whole, so the blocks of a quantized tensor (which run along the rows) are permuted
/// without dequantizing. `rows` must be a multiple of 2·n_head (else std::invalid_argument).
/// Whether a tensor needs it is structural: the file's rope is interleaved (ggml's "normal" rope)
/// while the captured graph rotates halves.
std::vector<int64_t> rope_unpermute_rows(int64_t rows, int64_t n_head);

}  // namespace fuselm::weights
