#include "kernels/cpu/complex.h"

#include <cmath>

namespace fuselm::kernels {
namespace {

void load_complex(const Strided& t, int64_t off, double& re, double& im) {
  if (t.dtype == DType::c64) {
    re = t.ptr<float>()[2 * off];
    im = t.ptr<float>()[2 * off + 1];
  } else {
    re = load_double(t, off);
    im = 0;
  }
}

// Calls f(i, offset in x, offset in y) for every element i of out, x and y broadcast to it.
template <class F>
void for_each_pair(const Strided& x, const Strided& y, const Strided& out, F f) {
  const auto sx = broadcast_strides(x, out), sy = broadcast_strides(y, out);
  const int64_t n = out.numel();
  parallel_for_ranges(strided_threads(n), n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i, offset_of(i, out, sx), offset_of(i, out, sy));
  });
}

}  // namespace

void polar(const Strided& abs, const Strided& angle, const Strided& out) {
  float* o = out.ptr<float>();
  for_each_pair(abs, angle, out, [&](int64_t i, int64_t oa, int64_t ot) {
    const double r = load_double(abs, oa), th = load_double(angle, ot);
    o[2 * i] = static_cast<float>(r * std::cos(th));
    o[2 * i + 1] = static_cast<float>(r * std::sin(th));
  });
}

void complex_mul(const Strided& a, const Strided& b, const Strided& out) {
  float* o = out.ptr<float>();
  for_each_pair(a, b, out, [&](int64_t i, int64_t oa, int64_t ob) {
    double ar, ai, br, bi;
    load_complex(a, oa, ar, ai);
    load_complex(b, ob, br, bi);
    o[2 * i] = static_cast<float>(ar * br - ai * bi);
    o[2 * i + 1] = static_cast<float>(ar * bi + ai * br);
  });
}

}  // namespace fuselm::kernels
