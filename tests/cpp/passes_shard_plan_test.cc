// The tensor-parallel shard plan (passes/shard_plan.h) on small hand-built graphs, without MPI:
// what it splits, the literals and metas it rewrites for one rank, the collectives it inserts, and
// what it refuses (replicates, with why, or rejects in one line). Sizes are worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusers/pattern.h"
#include "passes/shard_plan.h"

namespace fuselm::passes {
namespace passes_shard_plan_test {

using fusers::HeadSection;
using fusers::Shard;

ir::Dim dim(int64_t v) { return ir::Dim{v, ""}; }
const ir::Dim kTokens{0, "s0"};

using fusers::integer;  // the fusers' own literal builders (fusers/pattern.h)
using fusers::real;
using fusers::ref;
ir::Arg boolean(bool v) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::boolean;
  a.b = v;
  return a;
}
ir::Arg text(const std::string& s) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::string;
  a.s = s;
  return a;
}
using fusers::none;
ir::Arg list(std::initializer_list<ir::Arg> items) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::list;
  a.list = items;
  return a;
}
// A shape literal: the token count as capture writes it (a symbol), other sizes as integers.
ir::Arg sizes(std::initializer_list<ir::Dim> dims) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::list;
  for (const auto& d : dims) {
    ir::Arg x = d.symbolic() ? ir::Arg{} : integer(d.value);
    if (d.symbolic()) x.kind = ir::Arg::Kind::sym, x.s = d.expr;
    a.list.push_back(x);
  }
  return a;
}

// A fusion plan built node by node.
struct Builder {
  fusers::Plan plan;
  ir::Graph& g = plan.graph;

  int add(ir::Node n) {
    n.index = static_cast<int>(g.nodes.size());
    if (n.name.empty()) n.name = "n" + std::to_string(n.index);
    g.index_by_name[n.name] = n.index;
    g.nodes.push_back(std::move(n));
    return g.nodes.back().index;
  }
  int placeholder(const std::string& kind, const std::string& target, std::vector<ir::Dim> shape,
                  ir::DType dt = ir::DType::f32) {
    ir::Node n;
    n.op = "placeholder";
    n.placeholder_kind = kind;
    n.target = target;
    n.out_kind = ir::Node::Out::tensor;
    n.out = {dt, std::move(shape)};
    return add(std::move(n));
  }
  int param(const std::string& target, std::vector<ir::Dim> shape) { return placeholder("parameter", target, shape); }
  int op(const std::string& name, std::vector<ir::Arg> args, std::vector<ir::Dim> shape) {
    ir::Node n;
    n.op = name;
    n.args = std::move(args);
    n.out_kind = ir::Node::Out::tensor;
    n.out = {ir::DType::f32, std::move(shape)};
    return add(std::move(n));
  }
  int linear(int x, int w, std::vector<ir::Dim> shape) {
    return op("aten.linear.default", {ref(x), ref(w), none()}, std::move(shape));
  }
  void note(int param, Shard s, int axis, std::vector<HeadSection> sections = {}) {
    plan.shards.push_back(fusers::ShardNote{param, g.nodes[param].target, s, axis, std::move(sections)});
  }
  void output(int i) { g.outputs = {i}; }
};

int count_op(const ir::Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

bool has_line(const std::vector<std::string>& lines, const std::string& want) {
  return std::find(lines.begin(), lines.end(), want) != lines.end();
}

// x [1, T, 8] -> linear(w1 [16, 8]) -> silu -> linear(w2 [8, 16]): the MLP of Megatron, w1 column
// parallel and w2 row parallel.
Builder mlp(bool bias_after_up = false) {
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int w2 = b.param("down.weight", {dim(8), dim(16)});
  int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  if (bias_after_up) {
    const int bias = b.param("up.extra", {dim(16)});
    h = b.op("aten.add.Tensor", {ref(h), ref(bias)}, {dim(1), kTokens, dim(16)});
  }
  const int a = b.op("aten.silu.default", {ref(h)}, {dim(1), kTokens, dim(16)});
  b.output(b.linear(a, w2, {dim(1), kTokens, dim(8)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  b.note(w2, Shard::row, 1);
  return b;
}

TEST(ShardPlan, SizeOneLeavesThePlanAsItIs) {
  Builder b = mlp();
  const auto before = b.g.nodes.size();
  const ShardPlan p = shard_plan(b.plan, 1, 0);
  EXPECT_TRUE(p.params.empty());
  EXPECT_TRUE(p.sharded.empty());
  EXPECT_EQ(b.g.nodes.size(), before);
  EXPECT_EQ(count_op(b.g, "fuselm.all_reduce.default"), 0);
}

TEST(ShardPlan, SplitsALinearPairColumnThenRow) {
  Builder b = mlp();
  const ShardPlan p = shard_plan(b.plan, 2, 1);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  // Rank 1 holds rows [8, 16) of the up projection and input columns [8, 16) of the down one.
  ASSERT_TRUE(p.params.contains("up.weight"));
  EXPECT_EQ(p.params.at("up.weight").axis, 0);
  EXPECT_EQ(p.params.at("up.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  ASSERT_TRUE(p.params.contains("down.weight"));
  EXPECT_EQ(p.params.at("down.weight").axis, 1);
  EXPECT_EQ(p.params.at("down.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_TRUE(has_line(p.sharded, "up.weight: column parallel (dim 0) up:16x1->8"));
  EXPECT_TRUE(has_line(p.sharded, "down.weight: row parallel (input dim 1: 8 of 16 per rank), then all-reduce"));
  EXPECT_EQ(p.all_reduces, 1);
  EXPECT_EQ(p.all_gathers, 0);
  // The split values' metas hold this rank's widths; the graph ends in the all-reduce.
  const auto& g = b.plan.graph;
  EXPECT_EQ(g.nodes[3].out.shape[2].value, 8);  // the up projection
  EXPECT_EQ(g.nodes[4].out.shape[2].value, 8);  // silu
  const auto& out = g.nodes[g.outputs.at(0)];
  EXPECT_EQ(out.op, "fuselm.all_reduce.default");
  EXPECT_EQ(g.nodes[out.args.at(0).ref].op, "aten.linear.default");
  EXPECT_EQ(out.out.shape[2].value, 8);
  EXPECT_EQ(g.op_args.at("fuselm.all_reduce.default"), std::vector<std::string>{"input"});
}

TEST(ShardPlan, RankZeroTakesTheFirstSlices) {
  Builder b = mlp();
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  EXPECT_EQ(p.params.at("up.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}}));
  EXPECT_EQ(p.params.at("down.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}}));
}

TEST(ShardPlan, ReplicatesWhatItCannotProve) {
  // A full-width replicated parameter added to the split activation: the up projection cannot stay
  // split, and then the down projection's input is whole, so both stay replicated, with why.
  Builder b = mlp(/*bias_after_up=*/true);
  const auto before = b.g.nodes.size();
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  EXPECT_TRUE(p.params.empty());
  EXPECT_TRUE(p.sharded.empty());
  ASSERT_EQ(p.replicated.size(), 2u);
  EXPECT_NE(p.replicated[0].find("up.weight: aten.add.Tensor"), std::string::npos) << p.replicated[0];
  EXPECT_NE(p.replicated[0].find("combines a split value with a replicated one of full width on the split dim"),
            std::string::npos)
      << p.replicated[0];
  EXPECT_NE(p.replicated[1].find("down.weight: aten.linear.default"), std::string::npos) << p.replicated[1];
  EXPECT_NE(p.replicated[1].find("is row parallel but its input is not split"), std::string::npos) << p.replicated[1];
  EXPECT_EQ(p.all_reduces, 0);
  EXPECT_EQ(b.g.nodes.size(), before);
  EXPECT_EQ(b.g.nodes[3].out.shape[2].value, 16);
}

TEST(ShardPlan, ReplicatesAReductionOverTheSplitDim) {
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  b.output(b.op("aten.mean.dim", {ref(h), list({integer(-1)}), boolean(true)}, {dim(1), kTokens, dim(1)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  ASSERT_EQ(p.replicated.size(), 1u);
  EXPECT_NE(p.replicated[0].find("reduces over the split dim"), std::string::npos) << p.replicated[0];
  EXPECT_TRUE(p.params.empty());
}

TEST(ShardPlan, FollowsAReductionOverAnotherDim) {
  // The sum over the tokens keeps the split columns; the row-parallel projection after it reduces.
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int w2 = b.param("down.weight", {dim(8), dim(16)});
  const int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  const int s = b.op("aten.sum.dim_IntList", {ref(h), list({integer(1)}), boolean(false)}, {dim(1), dim(16)});
  b.output(b.linear(s, w2, {dim(1), dim(8)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  b.note(w2, Shard::row, 1);
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  EXPECT_EQ(p.all_reduces, 1);
  EXPECT_EQ(b.plan.graph.nodes[s].out.shape[1].value, 8);
}

TEST(ShardPlan, FollowsAPointwiseChain) {
  // up -> cast -> times a per-token scale [1, T, 1] (whole: size 1 on the split dim) -> neg -> down.
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int scale = b.placeholder("input", "scale", {dim(1), kTokens, dim(1)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int w2 = b.param("down.weight", {dim(8), dim(16)});
  const int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  ir::Arg dt;
  dt.kind = ir::Arg::Kind::dtype;
  const int c = b.op("aten.to.dtype", {ref(h), dt}, {dim(1), kTokens, dim(16)});
  const int m = b.op("aten.mul.Tensor", {ref(c), ref(scale)}, {dim(1), kTokens, dim(16)});
  const int ng = b.op("aten.neg.default", {ref(m)}, {dim(1), kTokens, dim(16)});
  b.output(b.linear(ng, w2, {dim(1), kTokens, dim(8)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  b.note(w2, Shard::row, 1);
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  EXPECT_EQ(p.all_reduces, 1);
  for (int i : {h, c, m, ng}) EXPECT_EQ(b.plan.graph.nodes[i].out.shape[2].value, 8) << i;
}

TEST(ShardPlan, ReplicatesAnOpWithoutARule) {
  // aten.log has no tensor-parallel rule in the op traits: a split value reaching it is refused.
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int w2 = b.param("down.weight", {dim(8), dim(16)});
  const int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  const int l = b.op("aten.log.default", {ref(h)}, {dim(1), kTokens, dim(16)});
  b.output(b.linear(l, w2, {dim(1), kTokens, dim(8)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  b.note(w2, Shard::row, 1);
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  ASSERT_EQ(p.replicated.size(), 2u);
  EXPECT_NE(p.replicated[0].find("aten.log.default"), std::string::npos) << p.replicated[0];
  EXPECT_EQ(p.all_reduces, 0);
}

TEST(ShardPlan, NormalizesOverASplitWidthWithOneAllReduce) {
  // fuselm.rms_norm over the split last dim (OLMoE's full-width q norm): it becomes
  // fuselm.rms_norm_split with the global width, and its weight is sliced as its input.
  Builder b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(8)});
  const int w1 = b.param("up.weight", {dim(16), dim(8)});
  const int w2 = b.param("down.weight", {dim(8), dim(16)});
  const int nw = b.param("norm.weight", {dim(16)});
  const int h = b.linear(x, w1, {dim(1), kTokens, dim(16)});
  const int n = b.op("fuselm.rms_norm.default", {ref(h), ref(nw), real(1e-6), real(0.0)}, {dim(1), kTokens, dim(16)});
  b.output(b.linear(n, w2, {dim(1), kTokens, dim(8)}));
  b.note(w1, Shard::column, 0, {HeadSection{"up", 16, 1, false}});
  b.note(w2, Shard::row, 1);
  const ShardPlan p = shard_plan(b.plan, 2, 1);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  EXPECT_EQ(p.all_reduces, 2);  // the norm's sum of squares and the row-parallel projection
  const auto& norm = b.plan.graph.nodes[n];
  EXPECT_EQ(norm.op, "fuselm.rms_norm_split.default");
  EXPECT_EQ(norm.args.at(4).i, 16);
  EXPECT_EQ(p.params.at("norm.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_EQ(b.plan.graph.op_args.at("fuselm.rms_norm_split.default").size(), 5u);
}

TEST(ShardPlan, RejectsHeadsThatDoNotDivide) {
  Builder b = mlp();
  b.plan.shards[0].sections = {HeadSection{"q", 3, 8, false}};
  b.g.nodes[1].out.shape[0] = dim(24);
  try {
    shard_plan(b.plan, 2, 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "tensor parallel size 2: up.weight (q) has 3 heads x 8 = 24 columns, which do "
                                     "not divide among 2 ranks");
  }
}

TEST(ShardPlan, RejectsARowWidthThatDoesNotDivide) {
  Builder b = mlp();
  EXPECT_THROW(shard_plan(b.plan, 3, 0), std::runtime_error);  // 16 columns (and 16 rows) over 3 ranks
}

// x [1, T, 32] -> fused qkv [64, 32] (q 4x8, k 2x8, v 2x8) -> split -> per-head views ->
// fuselm.attention -> [1, T, 32] -> o_proj [32, 32] (row parallel).
struct AttentionBlock {
  Builder b;
  int qkv = -1, split = -1, q_view = -1, k_view = -1, attn = -1, o_view = -1;
};

AttentionBlock attention_block() {
  AttentionBlock a;
  Builder& b = a.b;
  const int x = b.placeholder("input", "x", {dim(1), kTokens, dim(32)});
  const int w = b.param("attn.__fused_qkv.weight", {dim(64), dim(32)});
  const int wo = b.param("attn.o_proj.weight", {dim(32), dim(32)});
  a.qkv = b.linear(x, w, {dim(1), kTokens, dim(64)});
  ir::Node sp;
  sp.op = "aten.split_with_sizes.default";
  sp.args = {ref(a.qkv), list({integer(32), integer(16), integer(16)}), integer(-1)};
  sp.out_kind = ir::Node::Out::tuple;
  for (int64_t width : {32, 16, 16}) sp.outs.push_back({ir::DType::f32, {dim(1), kTokens, dim(width)}});
  a.split = b.add(std::move(sp));
  std::vector<int> heads;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t h = i == 0 ? 4 : 2;
    const int piece = b.op("getitem", {ref(a.split), integer(i)}, {dim(1), kTokens, dim(h * 8)});
    const int v = b.op("aten.view.default", {ref(piece), sizes({dim(1), kTokens, dim(h), dim(8)})},
                       {dim(1), kTokens, dim(h), dim(8)});
    if (i == 0) a.q_view = v;
    if (i == 1) a.k_view = v;
    heads.push_back(b.op("aten.transpose.int", {ref(v), integer(1), integer(2)}, {dim(1), dim(h), kTokens, dim(8)}));
  }
  a.attn = b.op("fuselm.attention.default",
                {ref(heads[0]), ref(heads[1]), ref(heads[2]), none(), real(0.35), none(), none(), integer(0), none(),
                 text("causal"), none()},
                {dim(1), kTokens, dim(4), dim(8)});
  a.o_view = b.op("aten.view.default", {ref(a.attn), sizes({dim(1), kTokens, dim(32)})}, {dim(1), kTokens, dim(32)});
  b.output(b.linear(a.o_view, wo, {dim(1), kTokens, dim(32)}));
  fusers::WeightTransform t;
  t.name = "__fused_qkv.weight";
  t.target = "attn.__fused_qkv.weight";
  t.sources = {-1, -1, -1};
  t.source_targets = {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"};
  t.axis = 0;
  t.shape = {64, 32};
  t.shard = Shard::column;
  t.sections = {HeadSection{"q", 4, 8, false}, HeadSection{"k", 2, 8, true}, HeadSection{"v", 2, 8, true}};
  b.plan.weights.push_back(t);
  b.note(wo, Shard::row, 1);
  return a;
}

TEST(ShardPlan, SplitsAnAttentionBlockByHeads) {
  AttentionBlock a = attention_block();
  const ShardPlan p = shard_plan(a.b.plan, 2, 1);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  EXPECT_TRUE(has_line(p.sharded, "attn.__fused_qkv.weight: column parallel (dim 0) q:4x8->16 k:2x8->8 v:2x8->8"));
  // Each source of the stacked weight is cut to rank 1's heads before stacking.
  ASSERT_TRUE(p.stacked.contains("attn.__fused_qkv.weight"));
  const auto& per = p.stacked.at("attn.__fused_qkv.weight");
  ASSERT_EQ(per.size(), 3u);
  EXPECT_EQ(per[0].pieces, (std::vector<std::pair<int64_t, int64_t>>{{16, 16}}));
  EXPECT_EQ(per[1].pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_EQ(per[2].pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));
  EXPECT_EQ(p.stacked_shape.at("attn.__fused_qkv.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(p.params.at("attn.o_proj.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{16, 16}}));
  // The rank-dependent literals: the split sizes, the heads of each view, the width after attention.
  const auto& g = a.b.plan.graph;
  const auto& split_sizes = g.nodes[a.split].args[1].list;
  EXPECT_EQ(split_sizes[0].i, 16);
  EXPECT_EQ(split_sizes[1].i, 8);
  EXPECT_EQ(split_sizes[2].i, 8);
  EXPECT_EQ(g.nodes[a.q_view].args[1].list[2].i, 2);
  EXPECT_EQ(g.nodes[a.k_view].args[1].list[2].i, 1);
  EXPECT_EQ(g.nodes[a.o_view].args[1].list[2].i, 16);
  EXPECT_EQ(g.nodes[a.attn].out.shape[2].value, 2);
  // The KV layer holds this rank's one KV head of 8.
  ASSERT_EQ(a.b.plan.kv.size(), 1u);
  EXPECT_EQ(a.b.plan.kv[0].k_width, 8);
  EXPECT_EQ(a.b.plan.kv[0].v_width, 8);
  EXPECT_EQ(p.all_reduces, 1);
}

TEST(ShardPlan, ReplicatesFewKvHeadsOverRanks) {
  // 4 ranks, 2 KV heads: each rank keeps one query head and one (shared) KV head.
  AttentionBlock a = attention_block();
  const ShardPlan p = shard_plan(a.b.plan, 4, 3);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  const auto& per = p.stacked.at("attn.__fused_qkv.weight");
  EXPECT_EQ(per[0].pieces, (std::vector<std::pair<int64_t, int64_t>>{{24, 8}}));
  EXPECT_EQ(per[1].pieces, (std::vector<std::pair<int64_t, int64_t>>{{8, 8}}));  // rank 3 of 4: head 3*2/4 = 1
  EXPECT_EQ(a.b.plan.kv.at(0).k_width, 8);
}

TEST(ShardPlan, RefusesAttentionSinks) {
  AttentionBlock a = attention_block();
  auto& g = a.b.g;
  const int sinks = a.b.param("attn.sinks", {dim(4)});
  g.nodes[a.attn].args[3] = ref(sinks);  // a placeholder after its reader: the walk holds it whole either way
  const ShardPlan p = shard_plan(a.b.plan, 2, 0);
  EXPECT_FALSE(p.replicated.empty());
  EXPECT_NE(p.replicated[0].find("has attention sinks"), std::string::npos) << p.replicated[0];
}

// ids [1, T] -> embedding(table [64, 8]) -> lm head (the same table or another [64, 8]).
Builder embedding_and_head(bool tied, int64_t vocab = 64) {
  Builder b;
  const int ids = b.placeholder("input", "input_ids", {dim(1), kTokens}, ir::DType::i64);
  const int table = b.param("embed.weight", {dim(vocab), dim(8)});
  const int head = tied ? table : b.param("lm_head.weight", {dim(vocab), dim(8)});
  const int e = b.op("aten.embedding.default", {ref(table), ref(ids)}, {dim(1), kTokens, dim(8)});
  const int r = b.op("aten.relu.default", {ref(e)}, {dim(1), kTokens, dim(8)});
  const int logits = b.linear(r, head, {dim(1), kTokens, dim(vocab)});
  b.output(b.op("aten.mul.Scalar", {ref(logits), real(0.5)}, {dim(1), kTokens, dim(vocab)}));
  return b;
}

TEST(ShardPlan, SplitsEmbeddingAndLmHeadByVocabulary) {
  Builder b = embedding_and_head(/*tied=*/false);
  const ShardPlan p = shard_plan(b.plan, 2, 1);
  ASSERT_TRUE(p.replicated.empty()) << p.replicated.front();
  EXPECT_TRUE(has_line(p.sharded, "embed.weight: vocab parallel (dim 0: 32 of 64 rows per rank)"));
  EXPECT_TRUE(has_line(p.sharded, "lm_head.weight: vocab parallel (dim 0: 32 of 64 rows per rank)"));
  EXPECT_EQ(p.params.at("embed.weight").pieces, (std::vector<std::pair<int64_t, int64_t>>{{32, 32}}));
  EXPECT_EQ(p.all_reduces, 1);  // after the masked lookup
  EXPECT_EQ(p.all_gathers, 1);  // of the local logits
  const auto& g = b.plan.graph;
  ASSERT_EQ(count_op(g, "fuselm.vocab_embedding.default"), 1);
  for (const auto& n : g.nodes)
    if (n.op == "fuselm.vocab_embedding.default") EXPECT_EQ(n.args.at(2).i, 32);  // rank 1's first row
  // The gather sits right after the head; the scaling reads the full logits.
  const auto& out = g.nodes[g.outputs.at(0)];
  EXPECT_EQ(out.op, "aten.mul.Scalar");
  const auto& gathered = g.nodes[out.args[0].ref];
  EXPECT_EQ(gathered.op, "fuselm.all_gather.default");
  EXPECT_EQ(gathered.out.shape[2].value, 64);
  EXPECT_EQ(g.nodes[gathered.args[0].ref].out.shape[2].value, 32);
}

TEST(ShardPlan, SplitsATiedTableOnce) {
  Builder b = embedding_and_head(/*tied=*/true);
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  ASSERT_EQ(p.sharded.size(), 1u);
  EXPECT_EQ(p.sharded[0], "embed.weight: vocab parallel (dim 0: 32 of 64 rows per rank)");
  EXPECT_EQ(p.all_gathers, 1);
}

TEST(ShardPlan, KeepsAVocabularyThatDoesNotDivide) {
  Builder b = embedding_and_head(/*tied=*/false, 63);
  const ShardPlan p = shard_plan(b.plan, 2, 0);
  EXPECT_TRUE(p.sharded.empty());
  EXPECT_TRUE(has_line(p.replicated, "embed.weight: its 63 vocabulary rows do not divide among 2 ranks"));
  EXPECT_TRUE(has_line(p.replicated, "lm_head.weight: its 63 vocabulary rows do not divide among 2 ranks"));
  EXPECT_EQ(p.all_gathers, 0);
  EXPECT_EQ(count_op(b.plan.graph, "aten.embedding.default"), 1);
}

TEST(ShardPlan, FormatsInspectLines) {
  Builder b = mlp();
  const std::string s = format_shard_plan(shard_plan(b.plan, 2, 0));
  EXPECT_NE(s.find("tensor parallel: 2 ranks, 2 weights sharded, 0 replicated by the plan's notes, 1 all-reduces and 0 "
                   "all-gathers per forward"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  sharded     down.weight: row parallel"), std::string::npos) << s;
}

}  // namespace passes_shard_plan_test
}  // namespace fuselm::passes
