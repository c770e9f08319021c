#include "kernels/cpu/rope.h"

#include <stdexcept>

#include <fmt/format.h>

namespace fuselm::kernels {
namespace {

// One row of d elements; s* are the last-dim strides (1 on the hot path). This file is built for
// the baseline ISA (no FMA), so each product rounds before the sum, as torch's mul then add.
void rope_half_row(const float* x, int64_t sx, const float* c, int64_t sc, const float* s, int64_t ss, float* y,
                   int64_t d) {
  const int64_t h = d / 2;
  for (int64_t i = 0; i < h; ++i) y[i] = x[i * sx] * c[i * sc] + -x[(i + h) * sx] * s[i * ss];
  for (int64_t i = h; i < d; ++i) y[i] = x[i * sx] * c[i * sc] + x[(i - h) * sx] * s[i * ss];
}

void rope_interleaved_row(const float* x, int64_t sx, const float* c, int64_t sc, const float* s, int64_t ss,
                          float* y, int64_t d) {
  for (int64_t i = 0; i < d; i += 2) {
    y[i] = x[i * sx] * c[i * sc] + -x[(i + 1) * sx] * s[i * ss];
    y[i + 1] = x[(i + 1) * sx] * c[(i + 1) * sc] + x[i * sx] * s[(i + 1) * ss];
  }
}

bool same_shape(const Strided& a, const Strided& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

}  // namespace

void rope(RopePairing pairing, const Strided& x, const Strided& cos, const Strided& sin, const Strided& y) {
  if (x.dtype != DType::f32 || cos.dtype != DType::f32 || sin.dtype != DType::f32 || y.dtype != DType::f32)
    throw std::invalid_argument("rope: x, cos, sin and y must be f32");
  if (!same_shape(x, y) || y.ndim < 1 || y.strides[y.ndim - 1] != 1)
    throw std::invalid_argument("rope: y must have x's shape and a contiguous last dim");
  const int nd = y.ndim;
  const int64_t d = y.inner();
  if (d % 2 != 0) throw std::invalid_argument(fmt::format("rope: the rotated width {} is odd", d));
  const auto row = pairing == RopePairing::half ? rope_half_row : rope_interleaved_row;
  const auto cs = broadcast_strides(cos, y), ss = broadcast_strides(sin, y);
  const int64_t sx = x.strides[nd - 1], scl = cs[nd - 1], ssl = ss[nd - 1];
  parallel_rows<4>(y.shape, nd, {&x.strides, &cs, &ss, &y.strides}, [&](int64_t, const std::array<int64_t, 4>& off) {
    row(x.ptr<float>() + off[0], sx, cos.ptr<float>() + off[1], scl, sin.ptr<float>() + off[2], ssl,
        y.ptr<float>() + off[3], d);
  });
}

}  // namespace fuselm::kernels
