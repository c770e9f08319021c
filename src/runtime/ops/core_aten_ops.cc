// Core ATen ops that the first tested families never produced but other exports do (issue 15
// item 1): clamp in its three forms, square, softplus, expm1, pow with a scalar base,
// min/max of two tensors (NaN-propagating), stack, concat, repeat_interleave by an int and
// index_select.
// The arithmetic is the kernels' (kernels/cpu/elementwise.h, copy.h): clamp, square, expm1,
// softplus and pow.Scalar through doubles, as they always computed; min/max.other are minimum and
// maximum (the same values in fp32 as in double).
#include <vector>

#include "kernels/cpu/copy.h"
#include "kernels/cpu/elementwise.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Value of argument i as a tensor (a scalar becomes a 0-d f64 tensor over `storage`).
Tensor operand(OpCall& c, size_t i, double& storage) {
  const Value& v = c.args[i];
  return v.is_tensor() ? v.t : scalar_tensor(v, storage);
}

// out = clamp(x, lo, hi) over the broadcast of the operands (absent bounds are None); in place
// writes into x.
void clamp(OpCall& c, bool in_place) {
  if (!c.has(1) && !c.has(2)) c.fail("clamp needs at least one of min and max");
  const Tensor& target = c.tensor(0);
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
  const kernels::Strided vl = view(lo), vh = view(hi);
  kernels::clamp(view(target), has_lo ? &vl : nullptr, has_hi ? &vh : nullptr, view(out));
  set_out(c, out);
}

void unary(OpCall& c, kernels::UnaryFn fn, double p0 = 0, double p1 = 0) {
  const Tensor& x = c.tensor(0);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  kernels::unary(fn, view(x), view(out), p0, p1);
  set_out(c, out);
}

void binary(OpCall& c, kernels::BinaryFn fn) {
  double sa, sb;
  Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
  std::array<int64_t, kMaxDims> shape{};
  const int nd = broadcast_shape(a, b, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  kernels::binary(fn, 1.0, view(a), view(b), view(out));
  set_out(c, out);
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
  std::vector<int64_t> map(static_cast<size_t>(shape[d]));
  for (int64_t j = 0; j < shape[d]; ++j) map[static_cast<size_t>(j)] = j / r;
  kernels::gather_dim(view(x), d, map.data(), view(out));
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
  std::vector<int64_t> map(static_cast<size_t>(k));
  for (int64_t j = 0; j < k && out.numel() > 0 && x.ndim > 0; ++j) {  // as the walk met them
    int64_t pos = static_cast<int64_t>(load_double(index, j * (index.ndim ? index.strides[0] : 0)));
    if (pos < -x.shape[d] || pos >= x.shape[d])
      c.fail("index " + std::to_string(pos) + " is out of bounds for dimension " + std::to_string(d) + " of size " +
             std::to_string(x.shape[d]));
    map[static_cast<size_t>(j)] = pos < 0 ? pos + x.shape[d] : pos;
  }
  kernels::gather_dim(view(x), d, map.data(), view(out));
  set_out(c, out);
}

}  // namespace

void register_core_aten_ops(OpRegistry& r) {
  using B = kernels::BinaryFn;
  using U = kernels::UnaryFn;
  r.add("aten.clamp.default", [](OpCall& c) { clamp(c, false); });
  r.add("aten.clamp.Tensor", [](OpCall& c) { clamp(c, false); });
  r.add("aten.clamp_.default", [](OpCall& c) { clamp(c, true); });
  r.add("aten.square.default", [](OpCall& c) { unary(c, U::square); });
  r.add("aten.expm1.default", [](OpCall& c) { unary(c, U::expm1); });
  r.add("aten.softplus.default", [](OpCall& c) {  // softplus(x, beta, threshold)
    unary(c, U::softplus, c.has(1) ? c.real(1) : 1.0, c.has(2) ? c.real(2) : 20.0);
  });
  // pow.Scalar(Scalar self, Tensor exponent): a scalar base.
  r.add("aten.pow.Scalar", [](OpCall& c) { binary(c, B::pow_double); });
  // min.other / max.other are minimum / maximum: NaN from either side propagates.
  r.add("aten.min.other", [](OpCall& c) { binary(c, B::minimum); });
  r.add("aten.max.other", [](OpCall& c) { binary(c, B::maximum); });
  r.add("aten.stack.default", stack);
  r.add("aten.repeat_interleave.self_int", repeat_interleave);
  r.add("aten.index_select.default", index_select);
}

}  // namespace fuselm::runtime::ops
