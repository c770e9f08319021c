// Ops that mixture-of-experts routers use (docs/moe.md): top-k selection, max along a dim,
// gather/scatter by index, and in-place arithmetic on router weights.
//   topk(x, k, dim, largest, sorted) -> (values, int64 indices); ties keep the lower index first,
//     results are always sorted (a caller that asked sorted=False accepts any order)
//   max.dim(x, dim, keepdim) -> (values, int64 indices of the first maximum)
//   gather(x, dim, index): out[..i..] = x[.. index[..i..] along dim ..]
//   scatter_.value / scatter.value (x, dim, index, v): x[.. index[..i..] along dim ..] = v
//   add_/sub_/mul_/div_.Tensor (x, y): x op= y (y broadcast to x), result is x itself
// topk and max.dim compute in kernels/cpu/topk.h, the rest in kernels/cpu/index.h. In-place ops
// write through x's strides into its memory (torch.export keeps the mutation and later nodes read
// the mutated tensor by its original name) and return x.
#include "kernels/cpu/index.h"
#include "kernels/cpu/topk.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

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

// The index of gather/scatter checked against x before anything is read or written.
void check_index(OpCall& c, const Tensor& x, int d, const Tensor& index) {
  const std::string err = kernels::check_index_along(view(x), d, view(index));
  if (!err.empty()) c.fail(err);
}

void gather(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), x.ndim);
  const Tensor& index = c.tensor(2);
  check_index(c, x, d, index);
  Tensor out = c.alloc(x.dtype, index.sizes());
  kernels::gather_along(view(x), d, view(index), view(out));
  set_out(c, out);
}

void scatter_value(OpCall& c, bool in_place) {
  const Tensor& x = c.tensor(0);
  const int d = wrap_dim(c.integer(1), x.ndim);
  const Tensor& index = c.tensor(2);
  const double v = c.real(3);
  check_index(c, x, d, index);
  Tensor out = x;
  if (!in_place) {
    out = c.alloc(x.dtype, x.sizes());
    copy_into(x, out);
  }
  kernels::scatter_along(view(out), d, view(index), v);
  set_out(c, out);
}

void arith_in_place(OpCall& c, kernels::BinaryFn fn, double alpha = 1.0) {
  const Tensor& x = c.tensor(0);
  double scalar = 0;
  const Tensor y = c.arg(1).is_tensor() ? c.tensor(1) : scalar_tensor(c.arg(1), scalar);
  kernels::binary_in_place(fn, alpha, view(x), view(y));
  set_out(c, x);
}

}  // namespace

void register_router_ops(OpRegistry& r) {
  r.add("aten.topk.default", topk);
  r.add("aten.max.dim", max_dim);
  r.add("aten.gather.default", gather);
  r.add("aten.scatter_.value", [](OpCall& c) { scatter_value(c, true); });
  r.add("aten.scatter.value", [](OpCall& c) { scatter_value(c, false); });
  r.add("aten.add_.Tensor", [](OpCall& c) { arith_in_place(c, kernels::BinaryFn::add); });
  r.add("aten.sub_.Tensor", [](OpCall& c) { arith_in_place(c, kernels::BinaryFn::add, -1.0); });
  r.add("aten.mul_.Tensor", [](OpCall& c) { arith_in_place(c, kernels::BinaryFn::mul); });
  r.add("aten.div_.Tensor", [](OpCall& c) { arith_in_place(c, kernels::BinaryFn::div); });
}

}  // namespace fuselm::runtime::ops
