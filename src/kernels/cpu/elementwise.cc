#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation.h"

namespace fuselm::kernels {
namespace {

using Strides = std::array<int64_t, kMaxStridedDims>;

// fn(x, y) in T (float on the fp32 path, double otherwise), as the ATen ops compute it.
struct Add { template <class T> T operator()(T x, T y) const { return x + y; } };
struct AddAlpha {
  double alpha;
  float operator()(float x, float y) const { return x + static_cast<float>(alpha) * y; }
  double operator()(double x, double y) const { return x + alpha * y; }
};
struct Rsub {
  double alpha;
  template <class T> double operator()(T x, T y) const { return y - alpha * x; }
};
struct Mul { template <class T> T operator()(T x, T y) const { return x * y; } };
struct Div { template <class T> T operator()(T x, T y) const { return x / y; } };
struct DivFloor { template <class T> T operator()(T x, T y) const { return std::floor(x / y); } };
struct DivTrunc { template <class T> T operator()(T x, T y) const { return std::trunc(x / y); } };
struct Square { template <class T> T operator()(T x, T) const { return x * x; } };
struct Pow { template <class T> T operator()(T x, T y) const { return std::pow(x, y); } };
struct PowDouble {
  double operator()(double x, double y) const { return std::pow(x, y); }
};
struct Maximum { template <class T> T operator()(T x, T y) const { return (x != x || x > y) ? x : y; } };
struct Minimum { template <class T> T operator()(T x, T y) const { return (x != x || x < y) ? x : y; } };
struct Eq { template <class T> bool operator()(T x, T y) const { return x == y; } };
struct Ne { template <class T> bool operator()(T x, T y) const { return x != y; } };
struct Lt { template <class T> bool operator()(T x, T y) const { return x < y; } };
struct Le { template <class T> bool operator()(T x, T y) const { return x <= y; } };
struct Gt { template <class T> bool operator()(T x, T y) const { return x > y; } };
struct Ge { template <class T> bool operator()(T x, T y) const { return x >= y; } };
struct BitAnd {
  template <class T> double operator()(T x, T y) const {
    return static_cast<double>(static_cast<int64_t>(x) & static_cast<int64_t>(y));
  }
};
struct BitOr {
  template <class T> double operator()(T x, T y) const {
    return static_cast<double>(static_cast<int64_t>(x) | static_cast<int64_t>(y));
  }
};
struct LogicalAnd { template <class T> bool operator()(T x, T y) const { return (x != 0) && (y != 0); } };

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

template <class F>
void binary_impl(F f, const Strided& a, const Strided& b, const Strided& out) {
  if (out.numel() == 0) return;
  const Strides sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const int nd = out.ndim;
  const int64_t inner = out.inner();
  const int64_t ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
  // fp32 scalars given as f64 0-d views are read once.
  auto f32_operand = [](const Strided& t) { return t.dtype == DType::f32 || (t.ndim == 0 && t.dtype == DType::f64); };
  const bool fast = !std::is_same_v<F, PowDouble> && out.dtype == DType::f32 && f32_operand(a) && f32_operand(b);
  const float a0 = a.ndim == 0 ? static_cast<float>(load_double(a, 0)) : 0.f;
  const float b0 = b.ndim == 0 ? static_cast<float>(load_double(b, 0)) : 0.f;
  parallel_rows<2>(out.shape, nd, {&sa, &sb}, [&](int64_t row, const std::array<int64_t, 2>& off) {
    const int64_t done = row * inner;
    if constexpr (!std::is_same_v<F, PowDouble>) {
      if (fast) return binary_row_f32(f, a, b, a0, b0, off[0], off[1], ia, ib, out.ptr<float>() + done, inner);
    }
    for (int64_t k = 0; k < inner; ++k)
      store_double(out, done + k,
                   static_cast<double>(f(load_double(a, off[0] + k * ia), load_double(b, off[1] + k * ib))));
  });
}

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

using DoubleFn = double (*)(double);
using FastFn = void (*)(const float*, float*, int64_t);

struct UnaryKernel {
  DoubleFn f;
  FastFn fast;  // the contiguous fp32 kernel of activation.h, or null
};

UnaryKernel unary_kernel(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::neg: return {[](double x) { return -x; }, nullptr};
    case UnaryFn::abs: return {[](double x) { return std::fabs(x); }, nullptr};
    case UnaryFn::rsqrt: return {[](double x) { return 1.0 / std::sqrt(x); }, nullptr};
    case UnaryFn::sqrt: return {[](double x) { return std::sqrt(x); }, nullptr};
    case UnaryFn::reciprocal: return {[](double x) { return 1.0 / x; }, nullptr};
    case UnaryFn::exp: return {[](double x) { return std::exp(x); }, unary_exp_f32};
    case UnaryFn::log: return {[](double x) { return std::log(x); }, nullptr};
    case UnaryFn::sin: return {[](double x) { return std::sin(x); }, nullptr};
    case UnaryFn::cos: return {[](double x) { return std::cos(x); }, nullptr};
    case UnaryFn::erf: return {[](double x) { return std::erf(x); }, nullptr};
    case UnaryFn::floor: return {[](double x) { return std::floor(x); }, nullptr};
    case UnaryFn::logical_not: return {[](double x) { return static_cast<double>(x == 0.0); }, nullptr};
    case UnaryFn::bool_not: return {[](double x) { return x == 0.0 ? 1.0 : 0.0; }, nullptr};
    case UnaryFn::bitwise_not: return {[](double x) { return static_cast<double>(~static_cast<int64_t>(x)); }, nullptr};
    case UnaryFn::tanh: return {[](double x) { return std::tanh(x); }, unary_tanh_f32};
    case UnaryFn::sigmoid: return {[](double x) { return 1.0 / (1.0 + std::exp(-x)); }, unary_sigmoid_f32};
    case UnaryFn::silu: return {[](double x) { return x / (1.0 + std::exp(-x)); }, unary_silu_f32};
    case UnaryFn::relu: return {[](double x) { return x > 0 ? x : 0.0; }, nullptr};
    case UnaryFn::gelu: return {gelu_exact, unary_gelu_f32};
    case UnaryFn::gelu_tanh: return {gelu_tanh, unary_gelu_tanh_f32};
    case UnaryFn::square: return {[](double x) { return x * x; }, nullptr};
    case UnaryFn::expm1: return {[](double x) { return std::expm1(x); }, nullptr};
    case UnaryFn::softplus: break;  // has parameters: Softplus
  }
  return {nullptr, nullptr};
}

struct Softplus {
  double beta, threshold;
  double operator()(double x) const { return x * beta > threshold ? x : std::log1p(std::exp(beta * x)) / beta; }
};

bool contiguous(const Strided& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

}  // namespace

void binary(BinaryFn fn, double alpha, const Strided& a, const Strided& b, const Strided& out) {
  switch (fn) {
    case BinaryFn::add:
      if (alpha == 1.0) return binary_impl(Add{}, a, b, out);
      return binary_impl(AddAlpha{alpha}, a, b, out);
    case BinaryFn::rsub: return binary_impl(Rsub{alpha}, a, b, out);
    case BinaryFn::mul: return binary_impl(Mul{}, a, b, out);
    case BinaryFn::div: return binary_impl(Div{}, a, b, out);
    case BinaryFn::div_floor: return binary_impl(DivFloor{}, a, b, out);
    case BinaryFn::div_trunc: return binary_impl(DivTrunc{}, a, b, out);
    case BinaryFn::square: return binary_impl(Square{}, a, b, out);
    case BinaryFn::pow: return binary_impl(Pow{}, a, b, out);
    case BinaryFn::pow_double: return binary_impl(PowDouble{}, a, b, out);
    case BinaryFn::maximum: return binary_impl(Maximum{}, a, b, out);
    case BinaryFn::minimum: return binary_impl(Minimum{}, a, b, out);
    case BinaryFn::eq: return binary_impl(Eq{}, a, b, out);
    case BinaryFn::ne: return binary_impl(Ne{}, a, b, out);
    case BinaryFn::lt: return binary_impl(Lt{}, a, b, out);
    case BinaryFn::le: return binary_impl(Le{}, a, b, out);
    case BinaryFn::gt: return binary_impl(Gt{}, a, b, out);
    case BinaryFn::ge: return binary_impl(Ge{}, a, b, out);
    case BinaryFn::bitwise_and: return binary_impl(BitAnd{}, a, b, out);
    case BinaryFn::bitwise_or: return binary_impl(BitOr{}, a, b, out);
    case BinaryFn::logical_and: return binary_impl(LogicalAnd{}, a, b, out);
  }
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
  if (out.dtype == DType::f32 && x.dtype == DType::f32 && contiguous(x)) {
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
  parallel_rows<1>(x.shape, nd, {&x.strides}, [&](int64_t row, const std::array<int64_t, 1>& off) {
    for (int64_t k = 0; k < inner; ++k) store_double(out, row * inner + k, f(load_double(x, off[0] + k * ix)));
  });
}

void unary(UnaryFn fn, const Strided& x, const Strided& out, double p0, double p1) {
  if (fn == UnaryFn::softplus) return unary_impl(Softplus{p0, p1}, nullptr, x, out);
  const UnaryKernel kern = unary_kernel(fn);
  unary_impl(kern.f, kern.fast, x, out);
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
