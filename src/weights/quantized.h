#pragma once
// Quantized weights at load: the --dtype q8_0|q4_0 quantization of plain tensors, dequantization
// of block tensors a non-linear op reads, and whole-row permutations (llama.cpp's q/k order).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"
#include "weights/aligned_buffer.h"
#include "weights/load_parameters.h"

namespace fuselm::weights {

/// The block type DTypePolicy q8_0 / q4_0 asks for; nullopt for the float policies.
std::optional<kernels::QuantType> policy_quant_type(DTypePolicy p);

/// Whether a tensor of `shape` can be held as `t` blocks: 2-D, rows a whole number of blocks.
bool quantizable_shape(kernels::QuantType t, std::span<const int64_t> shape);

/// A [n, k] plain tensor (src of storage dtype `from`, any alignment) quantized row by row into a
/// new owned buffer appended to `buffers` (ggml's reference quantizer, kernels::quantize_row).
WeightView quantize_tensor(const void* src, kernels::DType from, const std::vector<int64_t>& shape,
                           kernels::QuantType t, std::vector<AlignedBuffer>& buffers);

/// A [n, k] (or 1-D [k]) tensor of `t` blocks dequantized into `to` (f32, bf16 or f16), a new owned buffer.
WeightView dequantize_tensor(const void* src, kernels::QuantType t, const std::vector<int64_t>& shape,
                             kernels::DType to, std::vector<AlignedBuffer>& buffers);

/// Row r of the result = row src_rows[r] of `src` (rows of row_bytes each), a new owned buffer.
const void* permute_rows(const void* src, int64_t row_bytes, std::span<const int64_t> src_rows,
                         std::vector<AlignedBuffer>& buffers);

}  // namespace fuselm::weights
