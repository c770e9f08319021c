// The mla fuser on captured toy modules (tests/cpp/data/mla/*.json, written by
// tests/python/make_mla_fixtures.py through the normal capture path): MLA with and without
// q-LoRA found under conventional and scrambled names, the stacked [q_down; kv_down] weight
// mapping, the rewritten graph and its latent KV layer; a latent without RMSNorm rejected with its
// reason; a GLU MLP and ordinary attention are not candidates; --disable-fuser mla leaves full
// attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/model.h"
#include "fusers/plan.h"
#include "ir/load.h"

namespace fuselm::fusers {
namespace fusers_mla_test {

// The toy's sizes (tests/python/test_mla.py): hidden 32, 4 heads, latent 12, rope 4, nope 6, v 5,
// q-LoRA rank 10.
constexpr int64_t kHid = 32, kHeads = 4, kR = 12, kDr = 4, kDn = 6, kDv = 5, kQr = 10;

ir::Graph fixture(const std::string& name) {
  return ir::load(std::string(FUSELM_SOURCE_DIR) + "/tests/cpp/data/mla/" + name + ".json");
}

const ReportEntry* entry(const Report& r, const std::string& module, const std::string& fuser) {
  for (const auto& e : r.entries)
    if (e.module == module && e.fuser == fuser) return &e;
  return nullptr;
}

int count_op(const ir::Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

std::vector<int64_t> param_shape(const ir::Graph& g, const std::string& target) {
  return g.parameters.at(target).at("shape").get<std::vector<int64_t>>();
}

void expect_latent_plan(const Plan& plan, bool q_lora) {
  const auto* e = entry(plan.report, "block", "mla");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->status, ReportEntry::Status::fused) << e->detail;
  EXPECT_NE(e->detail.find("heads=4 latent=12 rope=4 nope=6 v=5 scale=0.3"), std::string::npos) << e->detail;
  EXPECT_NE(e->detail.find(q_lora ? "q_lora=10 stacked q_down|kv_down" : "q=direct"), std::string::npos) << e->detail;
  // The attention op and the expansion (kv_b_proj, its split) are gone; one latent op remains.
  EXPECT_EQ(count_op(plan.graph, "fuselm.attention.default"), 0);
  EXPECT_EQ(count_op(plan.graph, "fuselm.mla_attention.default"), 1);
  // linears left, kv_b_proj gone: q_proj, kv down, o_proj; or the stacked down GEMM, q_b_proj, o_proj
  EXPECT_EQ(count_op(plan.graph, "aten.linear.default"), 3);
  const auto layers = engine::attention_layer_shapes(plan.graph);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].k_width, kR + kDr);
  EXPECT_EQ(layers[0].v_width, 0);
  EXPECT_TRUE(layers[0].latent);
  EXPECT_EQ(layers[0].k_head, kR);  // the latent part: q8_0 pads it and the rope key apart
}

// The stacked weight: [q_down; kv_down] along dim 0, sources identified by their shapes (the
// names are the model's own, whatever they are).
void expect_stacked_down(const ir::Graph& g, const Plan& plan) {
  ASSERT_EQ(plan.weights.size(), 1u);
  const auto& w = plan.weights[0];
  EXPECT_EQ(w.target, "block.__fused_q_kv_down.weight");
  EXPECT_EQ(w.axis, 0);
  EXPECT_EQ(w.shard, Shard::column);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{kQr + kR + kDr, kHid}));
  ASSERT_EQ(w.source_targets.size(), 2u);
  EXPECT_EQ(param_shape(g, w.source_targets[0]), (std::vector<int64_t>{kQr, kHid}));
  EXPECT_EQ(param_shape(g, w.source_targets[1]), (std::vector<int64_t>{kR + kDr, kHid}));
  // The split that replaces the two projections cuts the GEMM's output at the q-LoRA rank.
  bool found = false;
  for (const auto& n : plan.graph.nodes)
    if (n.op == "aten.split_with_sizes.default" && n.args[1].list.size() == 2 && n.args[1].list[0].i == kQr &&
        n.args[1].list[1].i == kR + kDr)
      found = true;
  EXPECT_TRUE(found) << "no split [q_lora, latent + rope] of the stacked GEMM";
}

TEST(MlaFuser, QLoraConventionalNames) {
  const ir::Graph g = fixture("mla_lora_conventional");
  const Plan plan = apply(g);
  expect_latent_plan(plan, true);
  expect_stacked_down(g, plan);
  EXPECT_EQ(plan.weights[0].source_targets,
            (std::vector<std::string>{"block.q_a_proj.weight", "block.kv_a_proj_with_mqa.weight"}));
}

TEST(MlaFuser, QLoraScrambledNamesSamePlan) {
  const ir::Graph a = fixture("mla_lora_conventional"), b = fixture("mla_lora_scrambled");
  const Plan pa = apply(a), pb = apply(b);
  expect_latent_plan(pb, true);
  expect_stacked_down(b, pb);
  EXPECT_EQ(pb.weights[0].source_targets, (std::vector<std::string>{"block.zeta.weight", "block.iota.weight"}));
  EXPECT_EQ(entry(pa.report, "block", "mla")->detail, entry(pb.report, "block", "mla")->detail);
  EXPECT_EQ(pa.graph.nodes.size(), pb.graph.nodes.size());
}

TEST(MlaFuser, WithoutQLora) {
  const Plan plan = apply(fixture("mla_direct_scrambled"));
  expect_latent_plan(plan, false);
  EXPECT_TRUE(plan.weights.empty());
}

TEST(MlaFuser, GluMlpAndPlainAttentionAreNotCandidates) {
  for (const char* name : {"glu_mlp", "plain_attention"}) {
    SCOPED_TRACE(name);
    const Plan plan = apply(fixture(name));
    EXPECT_EQ(entry(plan.report, "block", "mla"), nullptr);
    EXPECT_EQ(plan.report.totals.count("mla") ? plan.report.totals.at("mla").second : 0, 0);
    EXPECT_EQ(count_op(plan.graph, "fuselm.mla_attention.default"), 0);
  }
  const Plan attn = apply(fixture("plain_attention"));
  const auto* qkv = entry(attn.report, "block", "qkv");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->status, ReportEntry::Status::fused);
  const Plan mlp = apply(fixture("glu_mlp"));
  const auto* glu = entry(mlp.report, "block", "glu");
  ASSERT_NE(glu, nullptr);
  EXPECT_EQ(glu->status, ReportEntry::Status::fused);
}

TEST(MlaFuser, LatentWithoutRmsNormIsRejectedWithItsReason) {
  const Plan plan = apply(fixture("mla_no_latent_norm"));
  const auto* e = entry(plan.report, "block", "mla");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, ReportEntry::Status::rejected);
  EXPECT_NE(e->detail.find("without an RMSNorm"), std::string::npos) << e->detail;
  EXPECT_TRUE(plan.report.errors.empty());
  EXPECT_EQ(count_op(plan.graph, "fuselm.attention.default"), 1);  // runs as full attention
  EXPECT_EQ(count_op(plan.graph, "fuselm.mla_attention.default"), 0);
}

TEST(MlaFuser, DisabledLeavesFullAttention) {
  Options o;
  o.disabled = {"mla"};
  const Plan plan = apply(fixture("mla_lora_conventional"), o);
  EXPECT_EQ(entry(plan.report, "block", "mla"), nullptr);
  EXPECT_EQ(count_op(plan.graph, "fuselm.attention.default"), 1);
  EXPECT_EQ(count_op(plan.graph, "fuselm.mla_attention.default"), 0);
  const auto layers = engine::attention_layer_shapes(plan.graph);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].k_width, kHeads * (kDn + kDr));
  EXPECT_EQ(layers[0].v_width, kHeads * kDv);
}

}  // namespace fusers_mla_test
}  // namespace fuselm::fusers
