#pragma once
// A quantized weight as the runtime's linear and embedding ops see it: ggml blocks (the rows as
// they lie in the GGUF, or as --dtype q8_0|q4_0 quantized them), and where the type has one the
// 16-row packed copy the integer kernels stream (quant_packed.h).
#include <cstdint>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_packed.h"

namespace fuselm::kernels {

/// Weights [n, k] of one block type. `blocks` holds n rows of row_bytes = quant_row_bytes(type, k)
/// (embedding lookups dequantize from it); `packed`, when not null, the same values repacked.
/// Neither is owned.
struct QuantWeight {
  QuantType type = QuantType::q8_0;
  const void* blocks = nullptr;
  int64_t n = 0, k = 0, row_bytes = 0;
  const QuantPacked* packed = nullptr;
};

/// y[m, n] = x[m, k] · Wᵀ + bias (x, y dense fp32; bias fp32 [n] or null): quant_linear_packed
/// when W is packed, else quant_linear on the blocks. Errors as those kernels'.
void quant_weight_linear(const QuantWeight& w, const float* x, int64_t m, const float* bias, float* y);

/// dst[0, k) = row `row` of W dequantized (0 <= row < n, unchecked).
void quant_weight_row(const QuantWeight& w, int64_t row, float* dst);

}  // namespace fuselm::kernels
