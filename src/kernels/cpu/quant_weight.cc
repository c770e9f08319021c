#include "kernels/cpu/quant_weight.h"

namespace fuselm::kernels {

void quant_weight_linear(const QuantWeight& w, const float* x, int64_t m, const float* bias, float* y) {
  if (w.packed) {
    quant_linear_packed(*w.packed, x, 0, bias, y, 0, m);
    return;
  }
  QuantLinearArgs a;
  a.x = x;
  a.w = w.blocks;
  a.w_type = w.type;
  a.ldw_bytes = w.row_bytes;
  a.bias = bias;
  a.y = y;
  a.m = m;
  a.n = w.n;
  a.k = w.k;
  quant_linear(a);
}

void quant_weight_row(const QuantWeight& w, int64_t row, float* dst) {
  dequantize_row(w.type, static_cast<const char*>(w.blocks) + row * w.row_bytes, dst, w.k);
}

}  // namespace fuselm::kernels
