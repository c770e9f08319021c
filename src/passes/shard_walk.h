#pragma once
// The shard plan's parts (passes/shard_plan.h is the pass): the seeds found in the fusion plan
// and the graph (shard_seeds.cc), and the walk that proves every op reading a split value
// (shard_walk.cc, shard_walk_ops.cc), dispatched on each op's tensor-parallel rule
// (ir::OpTraits::tp), never on its name. Internal to src/passes.
#include <fmt/core.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusers/plan.h"
#include "ir/op_defs.h"
#include "ir/op_traits.h"
#include "passes/shard_plan.h"

namespace fuselm::passes::shard {

using fusers::HeadSection;
using fusers::Shard;

// The ops the plan puts in the graph (their schemas: ir/op_defs.cc, their compute:
// runtime/ops/dist_ops.cc and matmul_ops.cc).
inline constexpr std::string_view kAllReduce = "fuselm.all_reduce.default";
inline constexpr std::string_view kAllGather = "fuselm.all_gather.default";
inline constexpr std::string_view kVocabEmbedding = "fuselm.vocab_embedding.default";
inline constexpr std::string_view kRmsNormSplit = "fuselm.rms_norm_split.default";

// A block along the split dim: global and local width.
struct Sec {
  int64_t g = 0, l = 0;
  bool operator==(const Sec&) const = default;
};

// How a value is split across ranks: along `dim` in blocks `secs` (none: every rank holds all of it).
struct Sh {
  int dim = -1;
  std::vector<Sec> secs;
  int origin = -1;  // the seed it came from
  bool split() const { return dim >= 0; }
  int64_t global() const {
    int64_t s = 0;
    for (const auto& x : secs) s += x.g;
    return s;
  }
  int64_t local() const {
    int64_t s = 0;
    for (const auto& x : secs) s += x.l;
    return s;
  }
};

// A seed: a weight the fusions annotated, with the sections it is split by.
struct Seed {
  std::string target;
  Shard kind = Shard::none;
  int axis = 0;
  std::vector<HeadSection> sections;  // column: one per block (stacked: one per source)
  bool stacked = false;
  int sources = 0;
  bool vocab = false;  // an embedding table / LM head split by vocabulary rows (one section)
  std::optional<Slice> fixed;  // a weight of an experts op: this rank's slice, fixed up front
  std::string line;            // ... inspect's line for it
  int64_t local = 0;           // ... and its local size along `axis`
};

// A failure of the walk: the seed to replicate and why.
struct Failure {
  int origin = -1;
  std::string why;
};

// Whether the op definition has an argument `name` (OpDef::arg throws when it has none).
bool has_arg(const ir::OpDef& def, std::string_view name);

// The seeds (shard_seeds.cc). collect_seeds: the fusion plan's notes (notes without per-rank sizes
// are replicated, with why; heads that do not divide throw one line). vocab_seeds: embedding tables
// and the LM head. moe_seeds: each experts op's weights. mla_seeds: each MLA op's heads.
// check_rows: row seeds must divide their input width (throws one line).
std::vector<Seed> collect_seeds(const fusers::Plan& plan, int64_t n, ShardPlan& out);
void vocab_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out);
void moe_seeds(const ir::Graph& g, int64_t n, int64_t rank, std::vector<Seed>& seeds, ShardPlan& out);
void mla_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out);
void check_rows(const ir::Graph& g, const std::vector<Seed>& seeds, int64_t n);

// One walk over a copy of the graph with the seeds not in `off`: run() proves every op that reads
// a split value, or returns the first failure (its seed is then turned off and the walk rerun).
class Walk {
 public:
  Walk(ir::Graph& g, const std::vector<Seed>& seeds, const std::set<int>& off, int64_t n, int64_t rank)
      : g_(g), seeds_(seeds), off_(off), n_(n), rank_(rank), sh_(g.nodes.size()), tuple_(g.nodes.size()) {}

  std::optional<Failure> run();

  // Literal edits, meta edits, all-reduce sites and zeroed biases of a walk that succeeded.
  std::vector<std::pair<ir::Arg*, int64_t>> edits;
  std::vector<int> reduce_after;
  std::map<int, int64_t> gather_after;  // vocab-parallel LM head -> its local width
  std::map<int, std::pair<int64_t, int64_t>> norm_weights;  // weight of a norm over a split width -> (first, local)
  int split_norms = 0;  // fuselm.rms_norm_split ops (one all-reduce each)
  std::set<std::string> zero_bias;
  std::set<int> used;  // seeds some op read
  const std::vector<Sh>& values() const { return sh_; }
  const std::vector<std::vector<Sh>>& tuples() const { return tuple_; }

 private:
  void seed_value(const ir::Node& node, int s);
  Failure fail(const ir::Node& node, int origin, const std::string& why) const;
  const Sh& in(const ir::Arg& a) const {
    static const Sh none;
    return a.kind == ir::Arg::Kind::ref ? sh_[a.ref] : none;
  }
  int split_origin(const ir::Node& node) const;

  // shard_walk.cc: the dispatch and the ops that move values.
  std::optional<Failure> step(ir::Node& node);
  std::optional<Failure> weight_op(ir::Node& node, ir::TpRule rule);
  std::optional<Failure> value_op(ir::Node& node, ir::TpRule rule, int origin);
  std::optional<Failure> linear(ir::Node& node, int x, int w, int b, bool kn);
  std::optional<Failure> view(ir::Node& node);
  std::optional<Failure> pointwise(ir::Node& node);
  std::optional<Failure> split_sizes(ir::Node& node);
  std::optional<Failure> getitem(ir::Node& node, int origin);
  std::optional<Failure> cat(ir::Node& node, int origin);
  std::optional<Failure> dims_op(ir::Node& node, ir::TpRule rule, const Sh& x);
  // shard_walk_ops.cc: the ops with their own split semantics.
  std::optional<Failure> embedding(ir::Node& node);
  std::optional<Failure> experts(ir::Node& node);
  std::optional<Failure> mla(ir::Node& node);
  std::optional<Failure> attention(ir::Node& node);
  std::optional<Failure> act_and_mul(ir::Node& node, int origin);
  std::optional<Failure> rope(ir::Node& node, int origin);
  std::optional<Failure> rms_norm(ir::Node& node, int origin);
  std::optional<Failure> norm_over_split(ir::Node& node, const Sh& x);

  ir::Graph& g_;
  const std::vector<Seed>& seeds_;
  const std::set<int>& off_;
  int64_t n_, rank_;
  std::vector<Sh> sh_;
  std::vector<std::vector<Sh>> tuple_;
  std::map<int, bool> row_;  // seed placeholder -> row parallel
};

}  // namespace fuselm::passes::shard
