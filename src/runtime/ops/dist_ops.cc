// fuselm.all_reduce(input): the sum over the tensor-parallel ranks of each rank's partial result
// (inserted by the sharding plan after every row-parallel projection, src/passes/shard_plan.h).
// In place: the input is the projection's own output and its only reader is this op.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "dist/communicator.h"
#include "kernels/cpu/copy.h"
#include "kernels/cpu/reduce.h"
#include "runtime/op_registry.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// The all-reduce of data[0..n) over the ranks of the op's communicator, timed into its stats.
void timed_all_reduce(OpCall& c, float* data, size_t n) {
  auto& comm = c.ctx.comm(c.node);
  const auto t0 = std::chrono::steady_clock::now();
  comm.all_reduce_sum(data, n);
  auto& st = comm.stats();
  st.all_reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++st.all_reduces;
}

}  // namespace

void register_dist_ops(OpRegistry& r) {
  r.add("fuselm.all_reduce.default", [](OpCall& c) {
    const Tensor& t = c.tensor(0);
    if (t.dtype != DType::f32) c.fail("all-reduce of a non-f32 tensor (run the model with --dtype f32 under TP)");
    if (!t.is_contiguous()) c.fail("all-reduce of a non-contiguous tensor");
    timed_all_reduce(c, t.ptr<float>(), static_cast<size_t>(t.numel()));
    set_out(c, t);
  });
  // fuselm.rms_norm_split(x [..., w], weight [w]?, eps, weight_offset, width): fuselm.rms_norm of a
  // row whose `width` columns are split across the ranks (w here): the sum of squares of each row
  // is all-reduced, then x · rsqrt(sum / width + eps) · (weight + offset) on the local columns.
  r.add("fuselm.rms_norm_split.default", [](OpCall& c) {
    const Tensor& x = c.tensor(0);
    if (x.ndim < 1) c.fail("rms_norm of a scalar");
    const int64_t w = x.shape[x.ndim - 1], rows = w ? x.numel() / w : 0, width = c.integer("width");
    if (width < w || width <= 0) c.fail("global width " + std::to_string(width) + " is below the local " + std::to_string(w));
    Scratch sx(c.ctx), sw(c.ctx), ss(c.ctx);
    Tensor xc = contiguous_as(x, DType::f32, sx);
    const float* wt = nullptr;
    if (c.has(1)) {
      Tensor wc = contiguous_as(c.tensor(1), DType::f32, sw);
      if (wc.numel() != w) c.fail("weight " + wc.describe() + " does not match rows of width " + std::to_string(w));
      wt = wc.ptr<float>();
    }
    Tensor sums = ss.alloc(DType::f32, std::span<const int64_t>(&rows, 1));
    const float* xp = xc.ptr<float>();
    float* sp = sums.ptr<float>();
    kernels::row_sum_squares(xp, rows, w, sp);
    timed_all_reduce(c, sp, static_cast<size_t>(rows));
    const float eps = static_cast<float>(c.real("eps")), off = static_cast<float>(c.real("weight_offset"));
    Tensor y = c.alloc(DType::f32, x.sizes());
    kernels::rms_scale_rows(xp, rows, w, sp, width, eps, wt, off, y.ptr<float>());
    if (c.out_dtype() == DType::f32) {
      set_out(c, y);
      return;
    }
    Tensor o = c.alloc(c.out_dtype(), y.sizes());
    copy_into(y, o);
    c.ctx.release(y.buffer);
    set_out(c, o);
  });
  // fuselm.all_gather(input [..., w]) -> [..., N*w]: rank r's columns land at [r*w, (r+1)*w) of each
  // row (the vocab-parallel LM head's logits, in vocabulary order).
  r.add("fuselm.all_gather.default", [](OpCall& c) {
    const Tensor& t = c.tensor(0);
    if (t.dtype != DType::f32) c.fail("all-gather of a non-f32 tensor (run the model with --dtype f32 under TP)");
    if (!t.is_contiguous() || t.ndim < 1) c.fail("all-gather of a non-contiguous tensor");
    auto& comm = c.ctx.comm(c.node);
    const int64_t n = comm.size(), w = t.shape[t.ndim - 1], rows = t.numel() / std::max<int64_t>(w, 1);
    std::array<int64_t, kMaxDims> shape{};
    for (int d = 0; d < t.ndim; ++d) shape[d] = t.shape[d];
    shape[t.ndim - 1] = w * n;
    Tensor out = c.alloc(DType::f32, std::span<const int64_t>(shape.data(), t.ndim));
    Scratch s(c.ctx);
    const int64_t total = n * rows * w;
    Tensor recv = s.alloc(DType::f32, std::span<const int64_t>(&total, 1));
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_gather(t.ptr<float>(), static_cast<size_t>(rows * w), recv.ptr<float>());
    auto& st = comm.stats();
    st.all_gather_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++st.all_gathers;
    // [rank][row][w] -> [row][rank][w]: recv read as [row, rank, w] through permuted strides
    kernels::Strided src, dst;
    src.data = recv.ptr<float>(), dst.data = out.ptr<float>();
    src.ndim = dst.ndim = 3;
    src.shape = dst.shape = {rows, n, w};
    src.strides = {w, rows * w, 1};
    dst.strides = {n * w, w, 1};
    kernels::copy_strided(src, dst);
    set_out(c, out);
  });
}

}  // namespace fuselm::runtime::ops
