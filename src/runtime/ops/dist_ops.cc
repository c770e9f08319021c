// fuselm.all_reduce(input): the sum over the tensor-parallel ranks of each rank's partial result
// (inserted by the sharding plan after every row-parallel projection, src/dist/shard_plan.h).
// In place: the input is the projection's own output and its only reader is this op.
#include <chrono>

#include "dist/communicator.h"
#include "runtime/op_registry.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {

void register_dist_ops(OpRegistry& r) {
  r.add("fuselm.all_reduce.default", [](OpCall& c) {
    const Tensor& t = c.tensor(0);
    if (t.dtype != DType::f32) c.fail("all-reduce of a non-f32 tensor (run the model with --dtype f32 under TP)");
    if (!t.is_contiguous()) c.fail("all-reduce of a non-contiguous tensor");
    const auto t0 = std::chrono::steady_clock::now();
    dist::world().all_reduce_sum(t.ptr<float>(), static_cast<size_t>(t.numel()));
    auto& st = dist::stats();
    st.all_reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++st.all_reduces;
    set_out(c, t);
  });
}

}  // namespace fuselm::runtime::ops
