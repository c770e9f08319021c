// Reductions: mean, sum, amax, softmax, cumsum, layer_norm. The dims and output shape are worked
// out here; the arithmetic is kernels/cpu/reduce.h (in double, as before).
#include <algorithm>

#include "kernels/cpu/reduce.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Reduces dims listed in argument 1 (all when empty); keepdim in argument 2.
void reduce(OpCall& c, kernels::ReduceFn fn) {
  const Tensor& x = c.tensor(0);
  std::array<int64_t, kMaxDims> dims{};
  int nd = c.has(1) ? c.ints(1, dims) : 0;
  bool keep = c.has(2) && c.boolean(2);
  std::array<bool, kMaxDims> red{};
  if (nd == 0) red.fill(true);
  for (int i = 0; i < nd; ++i) red[wrap_dim(dims[i], x.ndim)] = true;
  std::array<int64_t, kMaxDims> oshape{};
  int ond = 0;
  for (int d = 0; d < x.ndim; ++d) {
    if (!red[d]) oshape[ond++] = x.shape[d];
    else if (keep) oshape[ond++] = 1;
  }
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(oshape.data(), ond));
  kernels::reduce(fn, view(x), red, view(out));
  set_out(c, out);
}

// softmax over any dim d of an f32 copy; converted when the graph asks for another dtype.
void softmax(OpCall& c) {
  const Tensor& x = c.tensor(0);
  int d = wrap_dim(c.integer(1), x.ndim);
  Scratch s(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, s);
  Tensor out = c.alloc(DType::f32, x.sizes());
  kernels::softmax(view(xc), view(out), d);
  if (c.out_dtype() != DType::f32) {
    Tensor conv = c.alloc(c.out_dtype(), x.sizes());
    copy_into(out, conv);
    c.ctx.release(out.buffer);
    out = conv;
  }
  set_out(c, out);
}

void cumsum(OpCall& c) {
  const Tensor& x = c.tensor(0);
  int d = wrap_dim(c.integer(1), x.ndim);
  Scratch s(c.ctx);
  Tensor xc = contiguous_as(x, DType::f64, s);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  kernels::cumsum(view(xc), view(out), d);
  set_out(c, out);
}

// layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable) over the trailing dims.
void layer_norm(OpCall& c) {
  const Tensor& x = c.tensor(0);
  std::array<int64_t, kMaxDims> ns{};
  int nn = c.ints(1, ns);
  int64_t w = 1;
  for (int i = 0; i < nn; ++i) w *= ns[i];
  Scratch s1(c.ctx), s2(c.ctx), s3(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, s1);
  const float* wt = c.has(2) ? contiguous_as(c.tensor(2), DType::f32, s2).ptr<float>() : nullptr;
  const float* bt = c.has(3) ? contiguous_as(c.tensor(3), DType::f32, s3).ptr<float>() : nullptr;
  Tensor out = c.alloc(DType::f32, x.sizes());
  const int64_t rows = x.numel() / std::max<int64_t>(w, 1);
  kernels::layer_norm(xc.ptr<float>(), wt, bt, out.ptr<float>(), rows, w, c.real(4));
  set_out(c, out);
}

}  // namespace

void register_reduction_ops(OpRegistry& r) {
  r.add("aten.mean.dim", [](OpCall& c) { reduce(c, kernels::ReduceFn::mean); });
  r.add("aten.sum.dim_IntList", [](OpCall& c) { reduce(c, kernels::ReduceFn::sum); });
  r.add("aten.amax.default", [](OpCall& c) { reduce(c, kernels::ReduceFn::amax); });
  r.add("aten._softmax.default", softmax);
  r.add("aten.softmax.int", softmax);
  r.add("aten.cumsum.default", cumsum);
  r.add("aten.layer_norm.default", layer_norm);
}

}  // namespace fuselm::runtime::ops
