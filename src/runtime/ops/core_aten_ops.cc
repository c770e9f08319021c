// Core ATen ops that the first tested families never produced but other exports do (issue 15
// item 1): clamp in its three forms, square, softplus, expm1, pow with a scalar base,
// min/max of two tensors (NaN-propagating), stack, concat, repeat_interleave by an int and
// index_select.
// Arithmetic goes through doubles, as in the elementwise family's fallback path: these ops sit
// off the hot path (a rotary table, an activation), never in a GEMM.
#include <cmath>
#include <limits>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Value of argument i as a tensor (a scalar becomes a 0-d f64 tensor over `storage`).
Tensor operand(OpCall& c, size_t i, double& storage) {
  const Value& v = c.args[i];
  return v.is_tensor() ? v.t : scalar_tensor(v, storage);
}

// Offset of flat element i of `like`'s shape under `strides`.
int64_t offset(int64_t i, const Tensor& like, const std::array<int64_t, kMaxDims>& strides) {
  int64_t off = 0;
  for (int d = like.ndim - 1; d >= 0; --d) {
    off += (i % like.shape[d]) * strides[d];
    i /= like.shape[d];
  }
  return off;
}

// out[i] = f(x, lo, hi) over the broadcast of up to three operands (absent bounds are None).
template <typename F>
void ternary(OpCall& c, Tensor target, bool in_place, F f) {
  double s1 = 0, s2 = 0;
  const bool has_lo = c.has(1), has_hi = c.has(2);
  Tensor lo = has_lo ? operand(c, 1, s1) : Tensor{}, hi = has_hi ? operand(c, 2, s2) : Tensor{};
  std::array<int64_t, kMaxDims> shape{};
  int nd = target.ndim;
  for (int d = 0; d < nd; ++d) shape[d] = target.shape[d];
  Tensor out = target;
  if (!in_place) {
    Tensor acc = Tensor::contiguous_view(nullptr, DType::f32, target.sizes());
    for (const Tensor* b : {has_lo ? &lo : nullptr, has_hi ? &hi : nullptr}) {
      if (!b) continue;
      nd = broadcast_shape(acc, *b, shape);
      acc = Tensor::contiguous_view(nullptr, DType::f32, std::span<const int64_t>(shape.data(), nd));
    }
    out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  }
  std::array<int64_t, kMaxDims> sx{}, sl{}, sh{};
  broadcast_strides(target, out, sx);
  if (has_lo) broadcast_strides(lo, out, sl);
  if (has_hi) broadcast_strides(hi, out, sh);
  const double none = std::numeric_limits<double>::quiet_NaN();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = load_double(target, offset(i, out, sx));
    const double l = has_lo ? load_double(lo, offset(i, out, sl)) : none;
    const double h = has_hi ? load_double(hi, offset(i, out, sh)) : none;
    store_double(out, in_place ? offset(i, out, sx) : i, f(x, l, h));
  }
  set_out(c, out);
}

// torch.clamp: a NaN input or bound gives NaN; an absent bound (NaN here) is no bound.
double clamp_value(double x, double lo, double hi, bool has_lo, bool has_hi) {
  if (x != x) return x;
  if (has_lo) x = (lo != lo || x < lo) ? lo : x;
  if (has_hi) x = (hi != hi || x > hi) ? hi : x;
  return x;
}

void clamp(OpCall& c, bool in_place) {
  if (!c.has(1) && !c.has(2)) c.fail("clamp needs at least one of min and max");
  const bool lo = c.has(1), hi = c.has(2);
  ternary(c, c.tensor(0), in_place, [lo, hi](double x, double l, double h) { return clamp_value(x, l, h, lo, hi); });
}

template <typename F>
void unary(OpCall& c, F f) {
  const Tensor& x = c.tensor(0);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  std::array<int64_t, kMaxDims> sx{};
  broadcast_strides(x, out, sx);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) store_double(out, i, f(load_double(x, offset(i, out, sx))));
  set_out(c, out);
}

template <typename F>
void binary(OpCall& c, F f) {
  double sa, sb;
  Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
  std::array<int64_t, kMaxDims> shape{};
  const int nd = broadcast_shape(a, b, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  std::array<int64_t, kMaxDims> ka{}, kb{};
  broadcast_strides(a, out, ka);
  broadcast_strides(b, out, kb);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i)
    store_double(out, i, f(load_double(a, offset(i, out, ka)), load_double(b, offset(i, out, kb))));
  set_out(c, out);
}

// softplus(x, beta, threshold) = log1p(exp(beta x)) / beta, or x where beta x > threshold.
double softplus(double x, double beta, double threshold) {
  return x * beta > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

// stack(tensors, dim): every tensor the same shape; out has a new dim of size len(tensors).
void stack(OpCall& c) {
  const Value& list = c.args[0];
  if (list.kind != Value::Kind::list || list.list.empty()) c.fail("stack needs a non-empty list of tensors");
  const Tensor& first = list.list[0].t;
  const int d = wrap_dim(c.has(1) ? c.integer(1) : 0, first.ndim + 1);
  std::array<int64_t, kMaxDims> shape{};
  for (int k = 0, j = 0; k <= first.ndim; ++k) shape[k] = k == d ? static_cast<int64_t>(list.list.size()) : first.shape[j++];
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), first.ndim + 1));
  for (size_t i = 0; i < list.list.size(); ++i) {
    const Tensor& t = list.list[i].t;
    if (t.sizes().size() != first.sizes().size() || !std::equal(t.sizes().begin(), t.sizes().end(), first.sizes().begin()))
      c.fail("stack: tensor " + std::to_string(i) + " is " + t.describe() + ", tensor 0 is " + first.describe());
    Tensor dst = out;  // out.select(d, i)
    dst.data = static_cast<char*>(out.data) + static_cast<int64_t>(i) * out.strides[d] * ir::dtype_size(out.dtype);
    for (int k = d; k < first.ndim; ++k) {
      dst.shape[k] = out.shape[k + 1];
      dst.strides[k] = out.strides[k + 1];
    }
    dst.ndim = first.ndim;
    copy_into(t, dst);
  }
  set_out(c, out);
}

// repeat_interleave.self_int(self, repeats, dim=None, output_size=None): each element along dim
// repeated `repeats` times in place (x0 x0 x1 x1 ...); with no dim, over the flattened input.
void repeat_interleave(OpCall& c) {
  Tensor x = c.tensor(0);
  const int64_t r = c.integer(1);
  if (r < 0) c.fail("repeats must be non-negative, got " + std::to_string(r));
  Scratch s(c.ctx);
  if (!c.has(2)) {  // flatten first
    Tensor flat = contiguous_as(x, x.dtype, s);
    const int64_t n = flat.numel();
    x = Tensor::contiguous_view(flat.data, flat.dtype, std::span<const int64_t>(&n, 1));
  }
  const int d = c.has(2) ? wrap_dim(c.integer(2), x.ndim) : 0;
  std::array<int64_t, kMaxDims> shape{};
  for (int k = 0; k < x.ndim; ++k) shape[k] = k == d ? x.shape[k] * r : x.shape[k];
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), x.ndim));
  std::array<int64_t, kMaxDims> sx{};
  for (int k = 0; k < x.ndim; ++k) sx[k] = x.strides[k];
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int k = x.ndim - 1; k >= 0; --k) {
      const int64_t pos = rem % out.shape[k];
      rem /= out.shape[k];
      off += (k == d ? pos / r : pos) * sx[k];
    }
    store_double(out, i, load_double(x, off));
  }
  set_out(c, out);
}

// index_select(self, dim, index): the rows of self along dim named by the 1-D (or 0-d) index.
void index_select(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), std::max(x.ndim, 1));
  const Tensor& index = c.tensor(2);
  if (index.ndim > 1) c.fail("index must be 1-D, got " + index.describe());
  const int64_t k = index.numel();
  std::array<int64_t, kMaxDims> shape{};
  for (int j = 0; j < x.ndim; ++j) shape[j] = j == d ? k : x.shape[j];
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), x.ndim));
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int j = x.ndim - 1; j >= 0; --j) {
      int64_t pos = rem % out.shape[j];
      rem /= out.shape[j];
      if (j == d) {
        pos = static_cast<int64_t>(load_double(index, pos * (index.ndim ? index.strides[0] : 0)));
        if (pos < -x.shape[j] || pos >= x.shape[j])
          c.fail("index " + std::to_string(pos) + " is out of bounds for dimension " + std::to_string(d) + " of size " +
                 std::to_string(x.shape[j]));
        if (pos < 0) pos += x.shape[j];
      }
      off += pos * x.strides[j];
    }
    store_double(out, i, load_double(x, off));
  }
  set_out(c, out);
}

}  // namespace

void register_core_aten_ops(OpRegistry& r) {
  r.add("aten.clamp.default", [](OpCall& c) { clamp(c, false); });
  r.add("aten.clamp.Tensor", [](OpCall& c) { clamp(c, false); });
  r.add("aten.clamp_.default", [](OpCall& c) { clamp(c, true); });
  r.add("aten.square.default", [](OpCall& c) { unary(c, [](double x) { return x * x; }); });
  r.add("aten.expm1.default", [](OpCall& c) { unary(c, [](double x) { return std::expm1(x); }); });
  r.add("aten.softplus.default", [](OpCall& c) {
    const double beta = c.has(1) ? c.real(1) : 1.0, threshold = c.has(2) ? c.real(2) : 20.0;
    unary(c, [beta, threshold](double x) { return softplus(x, beta, threshold); });
  });
  // pow.Scalar(Scalar self, Tensor exponent): a scalar base.
  r.add("aten.pow.Scalar", [](OpCall& c) { binary(c, [](double x, double y) { return std::pow(x, y); }); });
  // min.other / max.other are minimum / maximum: NaN from either side propagates.
  r.add("aten.min.other", [](OpCall& c) { binary(c, [](double x, double y) { return (x != x || x < y) ? x : y; }); });
  r.add("aten.max.other", [](OpCall& c) { binary(c, [](double x, double y) { return (x != x || x > y) ? x : y; }); });
  r.add("aten.stack.default", stack);
  r.add("aten.repeat_interleave.self_int", repeat_interleave);
  r.add("aten.index_select.default", index_select);
}

}  // namespace fuselm::runtime::ops
