// The moe fuser on captured toy routers (tests/cpp/data/moe/*.json, written by
// tests/python/make_moe_fixtures.py through the normal capture path from the toys of
// tests/python/test_moe_toys.py). The oracle is the toys' own source: each router's kind, groups,
// top-k, renormalization (and its eps), scaling and correction bias are literals there, and so is
// each block's shared expert. For every toy: the fuselm.moe_route op the fusion inserts (its
// arguments, and the gate and bias parameters it reads, by shape), the router ops removed, the
// shared expert summed in (fuselm.experts_shared with its weights and activation) or reported
// and left alone; declined routers with their reasons, their ops kept and the experts unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fusers/plan.h"
#include "ir/load.h"

namespace fuselm::fusers {
namespace fusers_moe_test {

// The toys' sizes (test_moe_toys.py): hidden 32, shared-expert width 16, 8 experts, top-2.
constexpr int64_t kHid = 32, kInter = 16, kExperts = 8, kTopK = 2;

ir::Graph fixture(const std::string& name) {
  return ir::load(std::string(FUSELM_SOURCE_DIR) + "/tests/cpp/data/moe/" + name + ".json");
}

const ReportEntry* entry(const Report& r, const std::string& module, const std::string& fuser) {
  for (const auto& e : r.entries)
    if (e.module == module && e.fuser == fuser) return &e;
  return nullptr;
}

int count_op(const ir::Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

const ir::Node* only(const ir::Graph& g, const std::string& op) {
  const ir::Node* found = nullptr;
  for (const auto& n : g.nodes)
    if (n.op == op) {
      if (found) ADD_FAILURE() << "more than one " << op;
      found = &n;
    }
  return found;
}

// The parameter placeholder an argument reads, "" for None; a failure for anything else.
std::string param_of(const ir::Graph& g, const ir::Arg& a) {
  if (a.is_none()) return "";
  if (a.kind != ir::Arg::Kind::ref) {
    ADD_FAILURE() << "argument is neither None nor a node";
    return "?";
  }
  const ir::Node& n = g.nodes.at(a.ref);
  if (n.op != "placeholder" || n.placeholder_kind != "parameter") {
    ADD_FAILURE() << "argument reads " << n.op << " " << n.name << ", not a parameter";
    return "?";
  }
  return n.target;
}

std::vector<int64_t> param_shape(const ir::Graph& g, const std::string& target) {
  return g.parameters.at(target).at("shape").get<std::vector<int64_t>>();
}

struct Want {  // the router as its toy writes it
  std::string scoring;
  int64_t groups = 1, topk_group = 1;
  std::string group_score = "none";
  bool renorm = false;
  double eps = 0.0, scaling = 1.0;
  bool correction = false, upcast = false;
};

// The moe_route op's arguments (input, gate_weight, correction_bias, scoring, groups, topk_group,
// group_score, top_k, renorm, eps, scaling) against the toy's router.
void expect_route(const ir::Graph& g, const Want& w, const std::string& gate, const std::string& bias) {
  ASSERT_EQ(count_op(g, "fuselm.moe_route.default"), 1);
  const ir::Node& r = *only(g, "fuselm.moe_route.default");
  ASSERT_EQ(r.args.size(), 11u);
  // The gate's input is the block's [T, H] tokens (the reshape the toy makes), read directly.
  const ir::Node& x = g.nodes.at(r.args[0].ref);
  ASSERT_EQ(x.out.shape.size(), 2u);
  EXPECT_TRUE(x.out.shape[0].symbolic());
  EXPECT_EQ(x.out.shape[1].value, kHid);
  EXPECT_EQ(param_of(g, r.args[1]), gate);
  EXPECT_EQ(param_shape(g, gate), (std::vector<int64_t>{kExperts, kHid}));
  EXPECT_EQ(param_of(g, r.args[2]), w.correction ? bias : "");
  if (w.correction) EXPECT_EQ(param_shape(g, bias), (std::vector<int64_t>{kExperts}));
  EXPECT_EQ(r.args[3].s, w.scoring);
  EXPECT_EQ(r.args[4].i, w.groups);
  EXPECT_EQ(r.args[5].i, w.topk_group);
  EXPECT_EQ(r.args[6].s, w.group_score);
  EXPECT_EQ(r.args[7].i, kTopK);
  EXPECT_EQ(r.args[8].b, w.renorm);
  EXPECT_EQ(r.args[9].f, w.eps);
  EXPECT_EQ(r.args[10].f, w.scaling);
  // Weights f32 [T, k], ids i64 [T, k].
  ASSERT_EQ(r.outs.size(), 2u);
  EXPECT_EQ(r.outs[0].dtype, ir::DType::f32);
  EXPECT_EQ(r.outs[1].dtype, ir::DType::i64);
  for (const auto& o : r.outs) {
    ASSERT_EQ(o.shape.size(), 2u);
    EXPECT_EQ(o.shape[1].value, kTopK);
  }
  // The router's own ops are dead and removed; its top-k selects within the kernel now.
  for (const char* op : {"aten.topk.default", "aten.softmax.int", "aten._softmax.default", "aten.sigmoid.default",
                         "aten.gather.default", "aten.masked_fill.Scalar", "aten.scatter_.value"})
    EXPECT_EQ(count_op(g, op), 0) << op;
}

std::string detail_of(const Want& w, const std::string& shared) {
  std::string d = "router=" + w.scoring + " top_k=2 groups=";
  d += w.groups > 1 ? std::to_string(w.topk_group) + "/" + std::to_string(w.groups) + " by " + w.group_score : "1";
  d += std::string(" correction_bias=") + (w.correction ? "yes" : "no") + " renorm=" + (w.renorm ? "yes" : "no");
  char scaling[32];
  std::snprintf(scaling, sizeof scaling, "%g", w.scaling);
  d += std::string(" scaling=") + scaling + (w.upcast ? " fp32_upcast" : "") + " shared=" + shared;
  return d;
}

struct RouterCase {
  const char* fixture;
  Want want;
};

const Want kSoftmaxRenorm{"softmax", 1, 1, "none", true, 0.0, 1.0, false, false};

TEST(MoeFuser, RoutersAreReadWithTheirParameters) {
  const std::vector<RouterCase> cases = {
      {"softmax_renorm-none", kSoftmaxRenorm},
      {"sigmoid_scaled-none", {"sigmoid", 1, 1, "none", false, 0.0, 2.0, false, false}},
      {"fp32_upcast-none", {"softmax", 1, 1, "none", true, 0.0, 1.0, false, true}},
      {"correction-none", {"sigmoid", 1, 1, "none", true, 1e-20, 1.0, true, false}},
      {"viewed_correction-none", {"softmax", 1, 1, "none", false, 0.0, 2.0, true, false}},
      {"grouped_max-none", {"softmax", 4, 1, "max", false, 0.0, 1.0, false, false}},
      {"topk_softmax-none", {"softmax_of_topk", 1, 1, "none", false, 0.0, 1.0, false, false}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    const Plan plan = apply(g);
    EXPECT_TRUE(plan.report.errors.empty());
    const auto* e = entry(plan.report, "block", "moe");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->status, ReportEntry::Status::fused) << e->detail;
    EXPECT_EQ(e->detail, detail_of(c.want, "none"));
    expect_route(plan.graph, c.want, "block.router.weight", "block.router.correction");
    EXPECT_EQ(count_op(plan.graph, "fuselm.experts.default"), 1);
    EXPECT_EQ(count_op(plan.graph, "fuselm.experts_shared.default"), 0);
    // The experts read the routing op's outputs.
    const ir::Node& ex = *only(plan.graph, "fuselm.experts.default");
    for (int k : {1, 2}) {
      const ir::Node& gi = plan.graph.nodes.at(ex.args[k].ref);
      ASSERT_EQ(gi.op, "getitem");
      EXPECT_EQ(plan.graph.nodes.at(gi.args[0].ref).op, "fuselm.moe_route.default");
      EXPECT_EQ(gi.args[1].i, k == 1 ? 1 : 0);  // index ← ids (output 1), weights ← output 0
    }
  }
}

// The summed-in shared expert: fuselm.experts_shared with the routed arguments, then (shared_gate
// [1, H] | None, gate [I, H] | None, up [I, H], down [H, I], activation).
void expect_shared(const ir::Graph& g, bool gated, bool glu, const std::string& act, const std::string& prefix) {
  EXPECT_EQ(count_op(g, "fuselm.experts.default"), 0);
  ASSERT_EQ(count_op(g, "fuselm.experts_shared.default"), 1);
  const ir::Node& ex = *only(g, "fuselm.experts_shared.default");
  ASSERT_EQ(ex.args.size(), 18u);
  EXPECT_EQ(param_of(g, ex.args[13]), glu ? prefix + ".shared.gate.weight" : "");
  EXPECT_EQ(param_of(g, ex.args[14]), prefix + ".shared.up.weight");
  EXPECT_EQ(param_of(g, ex.args[15]), prefix + ".shared.down.weight");
  EXPECT_EQ(param_of(g, ex.args[16]), gated ? prefix + ".shared_gate.weight" : "");
  EXPECT_EQ(ex.args[17].s, act);
  EXPECT_EQ(param_shape(g, prefix + ".shared.up.weight"), (std::vector<int64_t>{kInter, kHid}));
  EXPECT_EQ(param_shape(g, prefix + ".shared.down.weight"), (std::vector<int64_t>{kHid, kInter}));
  if (gated) EXPECT_EQ(param_shape(g, prefix + ".shared_gate.weight"), (std::vector<int64_t>{1, kHid}));
  // The shared branch's own ops died with the add it replaced.
  EXPECT_EQ(count_op(g, "aten.linear.default"), 1);  // the LM head alone
  EXPECT_EQ(count_op(g, "aten.sigmoid.default"), 0);
}

TEST(MoeFuser, SharedExpertsAreSummedIn) {
  struct Case {
    const char *fixture, *shared;
    bool gated, glu;
    const char* act;
  };
  for (const auto& c : {Case{"softmax_renorm-gated", "gated(glu silu)", true, true, "silu"},
                        Case{"softmax_renorm-plain_mlp", "ungated(mlp relu)", false, false, "relu"}}) {
    SCOPED_TRACE(c.fixture);
    const Plan plan = apply(fixture(c.fixture));
    const auto* e = entry(plan.report, "block", "moe");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->status, ReportEntry::Status::fused) << e->detail;
    EXPECT_EQ(e->detail, detail_of(kSoftmaxRenorm, c.shared));
    expect_route(plan.graph, kSoftmaxRenorm, "block.router.weight", "");
    expect_shared(plan.graph, c.gated, c.glu, c.act, "block");
    // The shared GLU's multiply is the moe fusion's: the glu fuser does not stack a dead branch.
    const auto* glu = entry(plan.report, "block.shared", "glu");
    if (c.glu) {
      ASSERT_NE(glu, nullptr);
      EXPECT_EQ(glu->status, ReportEntry::Status::rejected);
      EXPECT_NE(glu->detail.find("overlaps the moe fusion"), std::string::npos) << glu->detail;
      EXPECT_TRUE(plan.weights.empty());
    }
  }
}

// DeepSeek-V3's router: sigmoid, correction bias for selection, 2 of 4 groups by the sum of each
// group's top 2, renormalized with eps 1e-20, scaled by 1.5; under conventional and scrambled
// names the same plan.
TEST(MoeFuser, GroupedRouterWithSharedExpertIsNameBlind) {
  const Want ds{"sigmoid", 4, 2, "top2_sum", true, 1e-20, 1.5, true, false};
  {
    const Plan plan = apply(fixture("grouped-ungated"));
    const auto* e = entry(plan.report, "block", "moe");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->detail, detail_of(ds, "ungated(glu silu)"));
    expect_route(plan.graph, ds, "block.router.weight", "block.router.correction");
    expect_shared(plan.graph, false, true, "silu", "block");
  }
  const ir::Graph a = fixture("grouped-gated"), b = fixture("grouped-gated-scrambled");
  const Plan pa = apply(a), pb = apply(b);
  const auto* ea = entry(pa.report, "block", "moe");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->detail, detail_of(ds, "gated(glu silu)"));
  expect_route(pa.graph, ds, "block.router.weight", "block.router.correction");
  expect_shared(pa.graph, true, true, "silu", "block");
  // Scrambled: no module is called block; the moe entry is the one module holding the fusion.
  EXPECT_EQ(entry(pb.report, "block", "moe"), nullptr);
  const ReportEntry* eb = nullptr;
  for (const auto& e : pb.report.entries)
    if (e.fuser == "moe") eb = &e;
  ASSERT_NE(eb, nullptr);
  EXPECT_EQ(eb->detail, ea->detail);
  const ir::Node& rb = *only(pb.graph, "fuselm.moe_route.default");
  EXPECT_EQ(param_shape(b, param_of(pb.graph, rb.args[1])), (std::vector<int64_t>{kExperts, kHid}));
  EXPECT_EQ(param_shape(b, param_of(pb.graph, rb.args[2])), (std::vector<int64_t>{kExperts}));
  EXPECT_EQ(pa.graph.nodes.size(), pb.graph.nodes.size());
  for (size_t i = 0; i < pa.graph.nodes.size(); ++i) EXPECT_EQ(pa.graph.nodes[i].op, pb.graph.nodes[i].op) << i;
}

TEST(MoeFuser, SharedExpertIsReportedButNotSummedInWhenTheBlockDoesMore) {
  struct Case {
    const char *fixture, *reason;
  };
  for (const auto& c : {Case{"softmax_renorm-extra_module", "the block combines the experts with more than its shared expert"},
                        Case{"softmax_renorm-shared_read_twice", "a value of the shared expert is read outside it"}}) {
    SCOPED_TRACE(c.fixture);
    const Plan plan = apply(fixture(c.fixture));
    const auto* e = entry(plan.report, "block", "moe");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->status, ReportEntry::Status::fused) << e->detail;
    EXPECT_EQ(e->detail, detail_of(kSoftmaxRenorm, std::string("ungated (not summed in: ") + c.reason + ")"));
    // The router is fused; the experts and the shared expert run as they were captured.
    expect_route(plan.graph, kSoftmaxRenorm, "block.router.weight", "");
    EXPECT_EQ(count_op(plan.graph, "fuselm.experts.default"), 1);
    EXPECT_EQ(count_op(plan.graph, "fuselm.experts_shared.default"), 0);
    const auto* glu = entry(plan.report, "block.shared", "glu");
    ASSERT_NE(glu, nullptr);
    EXPECT_EQ(glu->status, ReportEntry::Status::fused) << glu->detail;  // the shared GLU runs, stacked
  }
}

TEST(MoeFuser, UnprovableRoutersAreDeclinedWithTheirReasons) {
  struct Case {
    const char *fixture, *reason;
  };
  for (const auto& c : {Case{"biased_gate-none", "the gate linear has a bias, which the routing kernel does not model"},
                        Case{"disconnected-none",
                             "the router scores do not come from a linear gate (dataflow does not reach one)"}}) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    const Plan plan = apply(g);
    EXPECT_TRUE(plan.report.errors.empty());
    const auto* e = entry(plan.report, "block", "moe");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->status, ReportEntry::Status::rejected);
    EXPECT_EQ(e->detail, c.reason);
    // The router runs as the captured ATen ops; the experts op still runs fused.
    EXPECT_EQ(count_op(plan.graph, "fuselm.moe_route.default"), 0);
    EXPECT_EQ(count_op(plan.graph, "aten.topk.default"), count_op(g, "aten.topk.default"));
    EXPECT_EQ(count_op(plan.graph, "aten.topk.default"), 1);
    EXPECT_EQ(count_op(plan.graph, "fuselm.experts.default"), 1);
  }
}

TEST(MoeFuser, DisabledLeavesTheRouterOps) {
  Options o;
  o.disabled = {"moe"};
  const ir::Graph g = fixture("grouped-gated");
  const Plan plan = apply(g, o);
  EXPECT_EQ(entry(plan.report, "block", "moe"), nullptr);
  EXPECT_EQ(count_op(plan.graph, "fuselm.moe_route.default"), 0);
  EXPECT_EQ(count_op(plan.graph, "fuselm.experts_shared.default"), 0);
  EXPECT_EQ(count_op(plan.graph, "aten.topk.default"), count_op(g, "aten.topk.default"));
  EXPECT_EQ(count_op(plan.graph, "aten.topk.default"), 3);  // per group, of groups, final
}

}  // namespace fusers_moe_test
}  // namespace fuselm::fusers
