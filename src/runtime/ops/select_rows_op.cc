// fuselm.select_rows(x [1, T, H]) -> [1, R, H]: the rows of the token batch whose logits the step
// samples (Batch::logit_rows, in that order), or x itself when the batch selects none. The engine
// puts it before the graph's final product over the vocabulary (passes/logit_rows.h), so a
// prefill chunk of T tokens costs one LM-head row per sequence instead of T.
#include "ir/dtype.h"
#include "kernels/cpu/copy.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

void select_rows(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const Batch& b = c.ctx.batch();
  if (!b.select_rows) {
    set_out(c, x);
    return;
  }
  if (x.ndim != 3 || x.shape[0] != 1) c.fail("input " + x.describe() + " is not [1, tokens, width]");
  const int64_t tokens = x.shape[1], width = x.shape[2];
  Scratch s(c.ctx);
  Tensor xc = contiguous_as(x, x.dtype, s);
  const int64_t rows = static_cast<int64_t>(b.logit_rows.size());
  const int64_t shape[3] = {1, rows, width};
  Tensor y = c.alloc(x.dtype, shape);
  for (const int64_t src : b.logit_rows)
    if (src < 0 || src >= tokens) c.fail(fmt::format("logit row {} is outside the batch of {} tokens", src, tokens));
  kernels::gather_rows(xc.data, static_cast<size_t>(width * ir::dtype_size(x.dtype)), b.logit_rows.data(), rows, y.data);
  set_out(c, y);
}

}  // namespace

void register_select_rows_ops(OpRegistry& r) { r.add("fuselm.select_rows.default", select_rows); }

}  // namespace fuselm::runtime::ops
