#pragma once
// Row lookups of an embedding table (aten.embedding, fuselm.vocab_embedding).
//
//   embedding_lookup(a):  out[i, :] = table[ids[i] - first, :] as f32, for i < n. The table is
//     [rows, width] contiguous in a storage dtype (f32, bf16, f16) or block-quantized (quant set;
//     dequantized row by row). With `masked` (a vocab-parallel slice) an id in [0, first) or past
//     the slice gives a zero row (another rank holds it). Returns -1, or the index i of the first id
//     outside the table (negative, or unmasked and outside [first, first + rows)); then nothing
//     is written. Rows split over the thread pool for large lookups.
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

struct QuantWeight;  // quant_weight.h

struct EmbeddingArgs {
  const void* table = nullptr;
  DType dtype = DType::f32;
  const QuantWeight* quant = nullptr;
  int64_t rows = 0, width = 0, first = 0;
  bool masked = false;
  const int64_t* ids = nullptr;
  int64_t n = 0;
  float* out = nullptr;
};

int64_t embedding_lookup(const EmbeddingArgs& a);

}  // namespace fuselm::kernels
