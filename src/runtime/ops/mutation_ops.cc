// Ops that write into existing memory: copy_ into a view, and new_empty that such copies fill.
// transformers' MLA (DeepseekV2/V3 `expand_kv`) assembles its key as new_empty + two copy_ into
// slices of it; the graph keeps those mutations (torch.export is not functionalized), so the
// copies must write through the view into the base buffer, which views share (tensor.h).
#include <cstring>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// aten.new_empty(self, size, dtype?, layout?, device?, pin_memory?): zero-filled rather than
// uninitialized so a partly written tensor is deterministic.
void new_empty(OpCall& c) {
  std::array<int64_t, kMaxDims> shape{};
  const int nd = c.ints(1, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  std::memset(out.data, 0, out.numel() * ir::dtype_size(out.dtype));
  set_out(c, out);
}

// aten.copy_(self, src, non_blocking): src broadcast to self's shape, written through self's
// strides; the result is self (the same memory).
void copy_inplace(OpCall& c) {
  const Tensor& dst = c.tensor(0);
  Tensor src = c.tensor(1);
  if (src.ndim > dst.ndim) c.fail(fmt::format("copy_ source {} does not broadcast to {}", src.describe(), dst.describe()));
  for (int i = 0; i < src.ndim; ++i) {
    const int64_t s = src.shape[i], d = dst.shape[dst.ndim - src.ndim + i];
    if (s != d && s != 1)
      c.fail(fmt::format("copy_ source {} does not broadcast to {}", src.describe(), dst.describe()));
  }
  std::array<int64_t, kMaxDims> strides{};
  broadcast_strides(src, dst, strides);
  Tensor view = src;
  view.ndim = dst.ndim;
  view.shape = dst.shape;
  view.strides = strides;
  copy_into(view, dst);
  set_out(c, dst);
}

}  // namespace

void register_mutation_ops(OpRegistry& r) {
  r.add("aten.new_empty.default", new_empty);
  r.add("aten.copy_.default", copy_inplace);
}

}  // namespace fuselm::runtime::ops
