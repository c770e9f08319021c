#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/activation.h"

namespace fuselm::kernels {
namespace {

using Strides = std::array<int64_t, kMaxStridedDims>;

// One row of `inner` fp32 outputs; a or b may be a scalar (a0 / b0).
template <class F>
void binary_row_f32(F f, const Strided& a, const Strided& b, float a0, float b0, int64_t oa, int64_t ob,
                    int64_t ia, int64_t ib, float* o, int64_t inner) {
  auto g = [&f](float x, float y) { return static_cast<float>(f(x, y)); };
  if (a.ndim == 0 && b.ndim == 0) {  // both scalars: either may be an f64 0-d view
    o[0] = g(a0, b0);
  } else if (a.ndim == 0) {
    const float* pb = b.ptr<float>() + ob;
    if (ib == 1) for (int64_t k = 0; k < inner; ++k) o[k] = g(a0, pb[k]);
    else for (int64_t k = 0; k < inner; ++k) o[k] = g(a0, pb[k * ib]);
  } else if (b.ndim == 0) {
    const float* pa = a.ptr<float>() + oa;
    if (ia == 1) for (int64_t k = 0; k < inner; ++k) o[k] = g(pa[k], b0);
    else for (int64_t k = 0; k < inner; ++k) o[k] = g(pa[k * ia], b0);
  } else {
    const float* pa = a.ptr<float>() + oa;
    const float* pb = b.ptr<float>() + ob;
    if (ia == 1 && ib == 1) for (int64_t k = 0; k < inner; ++k) o[k] = g(pa[k], pb[k]);
    else for (int64_t k = 0; k < inner; ++k) o[k] = g(pa[k * ia], pb[k * ib]);
  }
}

template <bool kFp32, class F>
void binary_impl(F f, const Strided& a, const Strided& b, const Strided& out) {
  if (out.numel() == 0) return;
  const Strides sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const int nd = out.ndim;
  const int64_t inner = out.inner();
  const int64_t ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
  // fp32 scalars given as f64 0-d views are read once.
  auto f32_operand = [](const Strided& t) { return t.dtype == DType::f32 || (t.ndim == 0 && t.dtype == DType::f64); };
  const bool fast = kFp32 && out.dtype == DType::f32 && f32_operand(a) && f32_operand(b);
  const float a0 = a.ndim == 0 ? static_cast<float>(load_double(a, 0)) : 0.f;
  const float b0 = b.ndim == 0 ? static_cast<float>(load_double(b, 0)) : 0.f;
  parallel_rows<2>(out.shape, nd, {&sa, &sb}, [&](int64_t row, const std::array<int64_t, 2>& off) {
    const int64_t done = row * inner;
    if constexpr (kFp32) {
      if (fast) return binary_row_f32(f, a, b, a0, b0, off[0], off[1], ia, ib, out.ptr<float>() + done, inner);
    }
    for (int64_t k = 0; k < inner; ++k)
      store_double(out, done + k,
                   static_cast<double>(f(load_double(a, off[0] + k * ia), load_double(b, off[1] + k * ib))));
  });
}

using FastFn = void (*)(const float*, float*, int64_t);

}  // namespace

void binary(BinaryFn fn, double alpha, const Strided& a, const Strided& b, const Strided& out) {
#define FUSELM_BINARY_CASE(name, fp32, value)                                                  \
  case BinaryFn::name:                                                                         \
    return binary_impl<fp32>(                                                                  \
        [alpha](auto x, auto y) {                                                              \
          (void)alpha, (void)y;                                                                \
          return (value);                                                                      \
        },                                                                                     \
        a, b, out);
  switch (fn) { FUSELM_BINARY_FNS(FUSELM_BINARY_CASE) }
#undef FUSELM_BINARY_CASE
}

void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out) {
  const Strides sc = broadcast_strides(cond, out), sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const int nd = out.ndim;
  const int64_t inner = out.inner();
  const int64_t ic = nd ? sc[nd - 1] : 0, ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
  parallel_rows<3>(out.shape, nd, {&sc, &sa, &sb}, [&](int64_t row, const std::array<int64_t, 3>& off) {
    for (int64_t k = 0; k < inner; ++k)
      store_double(out, row * inner + k,
                   load_double(cond, off[0] + k * ic) != 0.0 ? load_double(a, off[1] + k * ia)
                                                             : load_double(b, off[2] + k * ib));
  });
}

void masked_fill(const Strided& mask, double v, const Strided& out) {
  const Strides sm = broadcast_strides(mask, out);
  const int nd = out.ndim;
  const int64_t inner = out.inner(), im = nd ? sm[nd - 1] : 0;
  parallel_rows<1>(out.shape, nd, {&sm}, [&](int64_t row, const std::array<int64_t, 1>& off) {
    for (int64_t k = 0; k < inner; ++k)
      if (load_double(mask, off[0] + k * im) != 0.0) store_double(out, row * inner + k, v);
  });
}

template <class F>
void unary_impl(F f, FastFn fast, const Strided& x, const Strided& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.dtype == DType::f32 && x.dtype == DType::f32 && x.contiguous()) {
    const float* in = x.ptr<float>();
    float* o = out.ptr<float>();
    if (fast) return fast(in, o, n);  // threads itself
    parallel_for_ranges(strided_threads(n), n, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = static_cast<float>(f(in[i]));
    });
    return;
  }
  const int nd = x.ndim;
  const int64_t inner = x.inner(), ix = nd ? x.strides[nd - 1] : 0;
  const bool f32 = out.dtype == DType::f32 && x.dtype == DType::f32;  // a view (rotate_half's slice)
  parallel_rows<1>(x.shape, nd, {&x.strides}, [&](int64_t row, const std::array<int64_t, 1>& off) {
    if (f32) {
      const float* in = x.ptr<float>() + off[0];
      float* o = out.ptr<float>() + row * inner;
      for (int64_t k = 0; k < inner; ++k) o[k] = static_cast<float>(f(in[k * ix]));
      return;
    }
    for (int64_t k = 0; k < inner; ++k) store_double(out, row * inner + k, f(load_double(x, off[0] + k * ix)));
  });
}

double erfinv(double y) {
  if (!(y >= -1.0 && y <= 1.0)) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0 || y == -1.0) return std::copysign(std::numeric_limits<double>::infinity(), y);
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * w;
  }
  double x = p * y;
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

void unary(UnaryFn fn, const Strided& x, const Strided& out, double p0, double p1) {
#define FUSELM_UNARY_CASE(name, value, fast)                                                   \
  case UnaryFn::name:                                                                          \
    return unary_impl(                                                                         \
        [p0, p1](double x) {                                                                   \
          (void)p0, (void)p1;                                                                  \
          return static_cast<double>(value);                                                   \
        },                                                                                     \
        fast, x, out);
  switch (fn) { FUSELM_UNARY_FNS(FUSELM_UNARY_CASE) }
#undef FUSELM_UNARY_CASE
}

void clamp(const Strided& x, const Strided* lo, const Strided* hi, const Strided& out) {
  const Strides sx = broadcast_strides(x, out), sl = lo ? broadcast_strides(*lo, out) : Strides{},
                sh = hi ? broadcast_strides(*hi, out) : Strides{};
  const int nd = out.ndim;
  const int64_t inner = out.inner(), last = nd - 1;
  const int64_t ix = nd ? sx[last] : 0, il = nd ? sl[last] : 0, ih = nd ? sh[last] : 0, io = nd ? out.strides[last] : 0;
  parallel_rows<4>(out.shape, nd, {&sx, &sl, &sh, &out.strides}, [&](int64_t, const std::array<int64_t, 4>& off) {
    for (int64_t k = 0; k < inner; ++k) {
      double v = load_double(x, off[0] + k * ix);
      if (v == v) {  // a NaN input stays NaN; a NaN bound gives NaN
        if (lo) {
          const double l = load_double(*lo, off[1] + k * il);
          v = (l != l || v < l) ? l : v;
        }
        if (hi) {
          const double h = load_double(*hi, off[2] + k * ih);
          v = (h != h || v > h) ? h : v;
        }
      }
      store_double(out, off[3] + k * io, v);
    }
  });
}

}  // namespace fuselm::kernels
