// Elementwise ops with PyTorch broadcasting. fp32 operands take a tight loop over the last
// dimension; other dtypes (integer position arithmetic, masks) go through doubles.
#include <cmath>
#include <cstring>

#include "kernels/cpu/activation.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Value of argument i as a tensor (a scalar becomes a 0-d f64 tensor over `storage`).
Tensor operand(OpCall& c, size_t i, double& storage) {
  const Value& v = c.args[i];
  return v.is_tensor() ? v.t : scalar_tensor(v, storage);
}

template <typename FF, typename FD>
void binary(OpCall& c, const Tensor& a, const Tensor& b, FF f32op, FD f64op) {
  std::array<int64_t, kMaxDims> shape{};
  int nd = broadcast_shape(a, b, shape);
  DType od = c.out_dtype();
  Tensor out = c.alloc(od, std::span<const int64_t>(shape.data(), nd));
  const int64_t n = out.numel();
  if (n == 0) {
    set_out(c, out);
    return;
  }
  std::array<int64_t, kMaxDims> sa{}, sb{}, idx{};
  broadcast_strides(a, out, sa);
  broadcast_strides(b, out, sb);
  const int64_t inner = nd ? shape[nd - 1] : 1;
  const int64_t ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
  // fp32 scalars given as f64 0-d tensors are read once.
  const bool fast = od == DType::f32 && (a.dtype == DType::f32 || (a.ndim == 0 && a.dtype == DType::f64)) &&
                    (b.dtype == DType::f32 || (b.ndim == 0 && b.dtype == DType::f64));
  const float a0 = a.ndim == 0 ? static_cast<float>(load_double(a, 0)) : 0.f;
  const float b0 = b.ndim == 0 ? static_cast<float>(load_double(b, 0)) : 0.f;
  float* o = out.ptr<float>();
  for (int64_t done = 0; done < n; done += inner) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < nd - 1; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    if (fast) {
      if (a.ndim == 0 && b.ndim == 0) {  // both scalars: either may be an f64 0-d view
        o[done] = f32op(a0, b0);
      } else if (a.ndim == 0) {
        const float* pb = b.ptr<float>() + ob;
        if (ib == 1) for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(a0, pb[k]);
        else for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(a0, pb[k * ib]);
      } else if (b.ndim == 0) {
        const float* pa = a.ptr<float>() + oa;
        if (ia == 1) for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(pa[k], b0);
        else for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(pa[k * ia], b0);
      } else {
        const float* pa = a.ptr<float>() + oa;
        const float* pb = b.ptr<float>() + ob;
        if (ia == 1 && ib == 1) for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(pa[k], pb[k]);
        else for (int64_t k = 0; k < inner; ++k) o[done + k] = f32op(pa[k * ia], pb[k * ib]);
      }
    } else {
      for (int64_t k = 0; k < inner; ++k)
        store_double(out, done + k, f64op(load_double(a, oa + k * ia), load_double(b, ob + k * ib)));
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  set_out(c, out);
}

template <typename F>
void binary_op(OpCall& c, F f) {
  double sa, sb;
  Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
  binary(c, a, b, [&](float x, float y) { return static_cast<float>(f(x, y)); },
         [&](double x, double y) { return static_cast<double>(f(x, y)); });
}

// add/sub with alpha: a + alpha * b.
void add_like(OpCall& c, double sign) {
  double alpha = (c.has(2) ? c.real(2) : 1.0) * sign;
  double sa, sb;
  Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
  if (alpha == 1.0) {
    binary(c, a, b, [](float x, float y) { return x + y; }, [](double x, double y) { return x + y; });
  } else {
    float fa = static_cast<float>(alpha);
    binary(c, a, b, [fa](float x, float y) { return x + fa * y; }, [alpha](double x, double y) { return x + alpha * y; });
  }
}

template <typename FF>
void unary(OpCall& c, FF f, void (*fast)(const float*, float*, int64_t) = nullptr) {
  const Tensor& x = c.tensor(0);
  DType od = c.out_dtype();
  Tensor out = c.alloc(od, x.sizes());
  const int64_t n = out.numel();
  if (od == DType::f32 && x.dtype == DType::f32 && x.is_contiguous()) {
    const float* in = x.ptr<float>();
    float* o = out.ptr<float>();
    if (fast) {
      fast(in, o, n);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(f(in[i]));
    }
  } else {
    Scratch s(c.ctx);
    Tensor xc = contiguous_as(x, DType::f64, s);
    for (int64_t i = 0; i < n; ++i) store_double(out, i, f(xc.ptr<double>()[i]));
  }
  set_out(c, out);
}

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

void where(OpCall& c) {
  // where.self(condition, self, other): out = cond ? a : b, all broadcast together.
  const Tensor& cond = c.tensor(0);
  double sa, sb;
  Tensor a = operand(c, 1, sa), b = operand(c, 2, sb);
  std::array<int64_t, kMaxDims> s1{}, shape{};
  int nd1 = broadcast_shape(a, b, s1);
  Tensor ab = Tensor::contiguous_view(nullptr, DType::f32, std::span<const int64_t>(s1.data(), nd1));
  int nd = broadcast_shape(cond, ab, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  std::array<int64_t, kMaxDims> sc{}, sA{}, sB{}, idx{};
  broadcast_strides(cond, out, sc);
  broadcast_strides(a, out, sA);
  broadcast_strides(b, out, sB);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t oc = 0, oa = 0, ob = 0;
    for (int d = 0; d < nd; ++d) {
      oc += idx[d] * sc[d];
      oa += idx[d] * sA[d];
      ob += idx[d] * sB[d];
    }
    store_double(out, i, load_double(cond, oc) != 0.0 ? load_double(a, oa) : load_double(b, ob));
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  set_out(c, out);
}

void masked_fill(OpCall& c) {  // masked_fill.Scalar(self, mask, value)
  const Tensor& x = c.tensor(0);
  const Tensor& mask = c.tensor(1);
  double v = c.real(2);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  copy_into(x, out);
  std::array<int64_t, kMaxDims> sm{}, idx{};
  broadcast_strides(mask, out, sm);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t om = 0;
    for (int d = 0; d < out.ndim; ++d) om += idx[d] * sm[d];
    if (load_double(mask, om) != 0.0) store_double(out, i, v);
    for (int d = out.ndim - 1; d >= 0; --d) {
      if (++idx[d] < out.shape[d]) break;
      idx[d] = 0;
    }
  }
  set_out(c, out);
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  for (const char* op : {"aten.add.Tensor", "aten.add.Scalar"}) r.add(op, [](OpCall& c) { add_like(c, 1.0); });
  for (const char* op : {"aten.sub.Tensor", "aten.sub.Scalar"}) r.add(op, [](OpCall& c) { add_like(c, -1.0); });
  r.add("aten.rsub.Scalar", [](OpCall& c) {  // other - alpha * self
    double alpha = c.has(2) ? c.real(2) : 1.0;
    double sa, sb;
    Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
    binary(c, a, b, [alpha](float x, float y) { return static_cast<float>(y - alpha * x); },
           [alpha](double x, double y) { return y - alpha * x; });
  });
  for (const char* op : {"aten.mul.Tensor", "aten.mul.Scalar"}) r.add(op, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x * y; }); });
  for (const char* op : {"aten.div.Tensor", "aten.div.Scalar"}) r.add(op, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x / y; }); });
  r.add("aten.div.Tensor_mode", [](OpCall& c) {
    std::string mode = c.args[2].kind == Value::Kind::string ? c.args[2].s : "";
    if (mode == "floor") binary_op(c, [](auto x, auto y) { return std::floor(x / y); });
    else if (mode == "trunc") binary_op(c, [](auto x, auto y) { return std::trunc(x / y); });
    else binary_op(c, [](auto x, auto y) { return x / y; });
  });
  for (const char* op : {"aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"}) {
    r.add(op, [](OpCall& c) {
      if (!c.args[1].is_tensor() && c.real(1) == 2.0) {
        binary_op(c, [](auto x, auto) { return x * x; });
      } else {
        binary_op(c, [](auto x, auto y) { return std::pow(x, y); });
      }
    });
  }
  // NaN propagates from either side, as in PyTorch (x != x is true only for NaN).
  r.add("aten.maximum.default", [](OpCall& c) { binary_op(c, [](auto x, auto y) { return (x != x || x > y) ? x : y; }); });
  r.add("aten.minimum.default", [](OpCall& c) { binary_op(c, [](auto x, auto y) { return (x != x || x < y) ? x : y; }); });
  for (const char* s : {"Tensor", "Scalar"}) {
    std::string t(s);
    r.add("aten.eq." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x == y; }); });
    r.add("aten.ne." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x != y; }); });
    r.add("aten.lt." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x < y; }); });
    r.add("aten.le." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x <= y; }); });
    r.add("aten.gt." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x > y; }); });
    r.add("aten.ge." + t, [](OpCall& c) { binary_op(c, [](auto x, auto y) { return x >= y; }); });
  }
  // Bitwise on the integer values; for bools (0/1) this is logical and/or.
  r.add("aten.bitwise_and.Tensor", [](OpCall& c) {
    binary_op(c, [](auto x, auto y) { return static_cast<double>(static_cast<int64_t>(x) & static_cast<int64_t>(y)); });
  });
  r.add("aten.bitwise_or.Tensor", [](OpCall& c) {
    binary_op(c, [](auto x, auto y) { return static_cast<double>(static_cast<int64_t>(x) | static_cast<int64_t>(y)); });
  });
  r.add("aten.logical_and.default", [](OpCall& c) { binary_op(c, [](auto x, auto y) { return (x != 0) && (y != 0); }); });
  r.add("aten.where.self", where);
  r.add("aten.masked_fill.Scalar", masked_fill);

  r.add("aten.neg.default", [](OpCall& c) { unary(c, [](double x) { return -x; }); });
  r.add("aten.abs.default", [](OpCall& c) { unary(c, [](double x) { return std::fabs(x); }); });
  r.add("aten.rsqrt.default", [](OpCall& c) { unary(c, [](double x) { return 1.0 / std::sqrt(x); }); });
  r.add("aten.sqrt.default", [](OpCall& c) { unary(c, [](double x) { return std::sqrt(x); }); });
  r.add("aten.reciprocal.default", [](OpCall& c) { unary(c, [](double x) { return 1.0 / x; }); });
  r.add("aten.exp.default", [](OpCall& c) { unary(c, [](double x) { return std::exp(x); }, kernels::unary_exp_f32); });
  r.add("aten.log.default", [](OpCall& c) { unary(c, [](double x) { return std::log(x); }); });
  r.add("aten.sin.default", [](OpCall& c) { unary(c, [](double x) { return std::sin(x); }); });
  r.add("aten.cos.default", [](OpCall& c) { unary(c, [](double x) { return std::cos(x); }); });
  r.add("aten.erf.default", [](OpCall& c) { unary(c, [](double x) { return std::erf(x); }); });
  r.add("aten.floor.default", [](OpCall& c) { unary(c, [](double x) { return std::floor(x); }); });
  r.add("aten.logical_not.default", [](OpCall& c) { unary(c, [](double x) { return x == 0.0; }); });
  r.add("aten.bitwise_not.default", [](OpCall& c) {  // logical for bools, ~x for integers
    if (c.tensor(0).dtype == DType::boolean) unary(c, [](double x) { return x == 0.0 ? 1.0 : 0.0; });
    else unary(c, [](double x) { return static_cast<double>(~static_cast<int64_t>(x)); });
  });
  r.add("aten.tanh.default", [](OpCall& c) { unary(c, [](double x) { return std::tanh(x); }, kernels::unary_tanh_f32); });
  r.add("aten.sigmoid.default", [](OpCall& c) { unary(c, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, kernels::unary_sigmoid_f32); });
  r.add("aten.silu.default", [](OpCall& c) { unary(c, [](double x) { return x / (1.0 + std::exp(-x)); }, kernels::unary_silu_f32); });
  r.add("aten.relu.default", [](OpCall& c) { unary(c, [](double x) { return x > 0 ? x : 0.0; }); });
  r.add("aten.gelu.default", [](OpCall& c) {
    bool tanh = c.args.size() > 1 && c.args[1].kind == Value::Kind::string && std::strcmp(c.args[1].s, "tanh") == 0;
    if (tanh) unary(c, gelu_tanh, kernels::unary_gelu_tanh_f32);
    else unary(c, gelu_exact, kernels::unary_gelu_f32);
  });
}

}  // namespace fuselm::runtime::ops
