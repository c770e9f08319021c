// Ops that mixture-of-experts routers use (docs/moe.md): top-k selection, max along a dim,
// gather/scatter by index, and in-place arithmetic on router weights.
//   topk(x, k, dim, largest, sorted) -> (values, int64 indices); ties keep the lower index first,
//     results are always sorted (a caller that asked sorted=False accepts any order)
//   max.dim(x, dim, keepdim) -> (values, int64 indices of the first maximum)
//   gather(x, dim, index): out[..i..] = x[.. index[..i..] along dim ..]
//   scatter_.value / scatter.value (x, dim, index, v): x[.. index[..i..] along dim ..] = v
//   add_/sub_/mul_/div_.Tensor (x, y): x op= y (y broadcast to x), result is x itself
// topk and max.dim compute in kernels/cpu/topk.h. In-place ops write through x's strides into its memory (torch.export keeps the mutation and
// later nodes read the mutated tensor by its original name) and return x.
#include "kernels/cpu/topk.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Offset of the row-major element `linear` of a tensor of shape `shape` under `strides`.
int64_t offset_of(int64_t linear, const Tensor& shape, std::span<const int64_t> strides) {
  int64_t off = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    const int64_t i = linear % shape.shape[d];
    linear /= shape.shape[d];
    off += i * strides[d];
  }
  return off;
}

Tensor alloc_line_out(OpCall& c, const Tensor& x, int d, int64_t width, DType dt, bool keep = true) {
  std::array<int64_t, kMaxDims> shape{};
  int nd = 0;
  for (int k = 0; k < x.ndim; ++k) {
    if (k == d && !keep) continue;
    shape[nd++] = k == d ? width : x.shape[k];
  }
  return c.alloc(dt, std::span<const int64_t>(shape.data(), nd));
}

void topk(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const int64_t k = c.integer(1);
  const int d = wrap_dim(c.has(2) ? c.integer(2) : -1, x.ndim);
  const bool largest = !c.has(3) || c.boolean(3);
  const int64_t w = x.shape[d];
  if (k < 0 || k > w) c.fail("k = " + std::to_string(k) + " is outside [0, " + std::to_string(w) + "]");
  Tensor vals = alloc_line_out(c, x, d, k, x.dtype);
  Tensor idx = alloc_line_out(c, x, d, k, DType::i64);
  kernels::topk(view(x), d, k, largest, view(vals), view(idx));
  c.out.kind = Value::Kind::list;
  c.out.list.resize(2);
  c.out.list[0].set_tensor(vals);
  c.out.list[1].set_tensor(idx);
}

void max_dim(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), x.ndim);
  const bool keep = c.has(2) && c.boolean(2);
  const int64_t w = x.shape[d];
  if (w == 0) c.fail("max over an empty dimension");
  Tensor vals = alloc_line_out(c, x, d, 1, x.dtype, keep);
  Tensor idx = alloc_line_out(c, x, d, 1, DType::i64, keep);
  kernels::max_dim(view(x), d, view(vals), view(idx));
  c.out.kind = Value::Kind::list;
  c.out.list.resize(2);
  c.out.list[0].set_tensor(vals);
  c.out.list[1].set_tensor(idx);
}

// Calls f(index element offset, x offset it addresses) over every element of `index`.
template <typename F>
void for_each_indexed(OpCall& c, const Tensor& x, int d, const Tensor& index, F f) {
  if (index.ndim != x.ndim) c.fail("index " + index.describe() + " and input " + x.describe() + " differ in rank");
  const int64_t n = index.numel();
  std::span<const int64_t> is(index.strides.data(), index.ndim);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, xoff = 0;
    const int64_t ioff = offset_of(i, index, is);
    const int64_t at = static_cast<int64_t>(load_double(index, ioff));
    if (at < -x.shape[d] || at >= x.shape[d])
      c.fail("index " + std::to_string(at) + " is out of bounds for dimension " + std::to_string(d) + " of size " +
             std::to_string(x.shape[d]));
    for (int k = index.ndim - 1; k >= 0; --k) {
      const int64_t pos = rem % index.shape[k];
      rem /= index.shape[k];
      if (k != d && pos >= x.shape[k]) c.fail("index " + index.describe() + " is larger than input " + x.describe());
      xoff += (k == d ? (at < 0 ? at + x.shape[d] : at) : pos) * x.strides[k];
    }
    f(i, xoff);
  }
}

void gather(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), x.ndim);
  const Tensor& index = c.tensor(2);
  Tensor out = c.alloc(x.dtype, index.sizes());
  for_each_indexed(c, x, d, index, [&](int64_t i, int64_t xoff) { store_double(out, i, load_double(x, xoff)); });
  set_out(c, out);
}

void scatter_value(OpCall& c, bool in_place) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), x.ndim);
  const Tensor& index = c.tensor(2);
  const double v = c.real(3);
  Tensor out = x;
  if (!in_place) {
    out = c.alloc(x.dtype, x.sizes());
    copy_into(x, out);
  }
  for_each_indexed(c, out, d, index, [&](int64_t, int64_t xoff) { store_double(out, xoff, v); });
  set_out(c, out);
}

template <typename Op>
void arith_in_place(OpCall& c, Op op) {
  const Tensor& x = c.tensor(0);
  double scalar = 0;
  const Tensor y = c.arg(1).is_tensor() ? c.tensor(1) : scalar_tensor(c.arg(1), scalar);
  std::array<int64_t, kMaxDims> ys{};
  Tensor xs = x;  // broadcast_strides reads only the target's shape
  broadcast_strides(y, xs, ys);
  const int64_t n = x.numel();
  std::span<const int64_t> xst(x.strides.data(), x.ndim), yst(ys.data(), x.ndim);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t xo = offset_of(i, x, xst), yo = offset_of(i, x, yst);
    store_double(x, xo, op(load_double(x, xo), load_double(y, yo)));
  }
  set_out(c, x);
}

}  // namespace

void register_router_ops(OpRegistry& r) {
  r.add("aten.topk.default", topk);
  r.add("aten.max.dim", max_dim);
  r.add("aten.gather.default", gather);
  r.add("aten.scatter_.value", [](OpCall& c) { scatter_value(c, true); });
  r.add("aten.scatter.value", [](OpCall& c) { scatter_value(c, false); });
  r.add("aten.add_.Tensor", [](OpCall& c) { arith_in_place(c, [](double a, double b) { return a + b; }); });
  r.add("aten.sub_.Tensor", [](OpCall& c) { arith_in_place(c, [](double a, double b) { return a - b; }); });
  r.add("aten.mul_.Tensor", [](OpCall& c) { arith_in_place(c, [](double a, double b) { return a * b; }); });
  r.add("aten.div_.Tensor", [](OpCall& c) { arith_in_place(c, [](double a, double b) { return a / b; }); });
}

}  // namespace fuselm::runtime::ops
