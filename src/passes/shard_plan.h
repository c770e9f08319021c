#pragma once
// The tensor-parallel sharding plan, derived from the fusion plan (docs/tensor-parallel.md).
// Seeds are the fusions' own notes: stacked weights column parallel by their head sections
// ([q_r; k_r; v_r], [gate_r; up_r]), packed weights column parallel by the sections their fuser
// measured, output/down projections row parallel; and, found by the graph's structure, the
// embedding tables and LM head (vocab parallel: masked lookup + all-reduce, local logits +
// all-gather), each experts op's weights (every expert's intermediate size, one all-reduce after
// it) and each MLA op's heads (q up-projection and w_up column, the output projection row). From the seeds a propagation walks the
// rewritten graph and proves every op that reads a value split across ranks: it knows the split
// dim and each block's global and local size, rewrites the rank-dependent literals (split sizes,
// view/reshape/expand sizes that carry heads or widths) from those sizes, fixes the metas (so the
// KV layers come out per rank) and inserts fuselm.all_reduce after each row-parallel projection.
// An RMSNorm over a split width all-reduces its sum of squares (fuselm.rms_norm_split).
// An op it cannot prove (another reduction over a split width, an unknown op, a value leaving the
// region split) makes the seed it came from replicated, with the reason; the walk restarts without it.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fusers/plan.h"

namespace fuselm::passes {

/// One rank's share of a parameter: the pieces (offset, length) along `axis`, concatenated in
/// order; `zero` for a row-parallel projection's bias on ranks other than 0 (added once).
struct Slice {
  int axis = 0;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  bool zero = false;
};

struct ShardPlan {
  int64_t size = 1, rank = 0;
  std::map<std::string, Slice> params;                 // graph parameter target -> its slice
  std::map<std::string, std::vector<Slice>> stacked;   // fused weight target -> one slice per source
  std::map<std::string, std::vector<int64_t>> stacked_shape;  // fused weight target -> per-rank shape
  std::vector<std::string> sharded;     // "<target>: column|row ..." lines
  std::vector<std::string> replicated;  // "<target>: <why>" lines
  int all_reduces = 0;
  int all_gathers = 0;  // of the vocab-parallel LM head's logits
};

/// Shards `plan` for rank `rank` of `size`: rewrites plan.graph (literals, metas, all-reduces)
/// and plan.kv, and returns what each parameter of this rank holds. At size 1 the plan is left as
/// it is. Throws std::runtime_error, one line naming the weight (its module path) and the widths,
/// for a head count or width that does not divide among the ranks: before any weight is read.
ShardPlan shard_plan(fusers::Plan& plan, int64_t size, int64_t rank);

/// inspect's lines: what is sharded, what is replicated and why.
std::string format_shard_plan(const ShardPlan& p);

}  // namespace fuselm::passes
