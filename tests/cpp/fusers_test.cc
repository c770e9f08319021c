// The rms_norm, glu, qkv, packed_qkv, rope, softcap and attention fusers on captured toy modules
// (tests/cpp/data/fusers/*.json, written by tests/python/make_fuser_fixtures.py through the normal
// capture path from the toys of tests/python/test_fusers.py). The oracle is the toys' source: the
// eps, weight form, activation, widths, head counts, scales and layer indices are literals there
// (hidden 32, GLU width 64, 4 heads of 8). For every toy: the report entry (status and the exact
// detail or reason), the rewritten graph's fused ops and their arguments, and the weight
// transforms (sources in gate/up or q/k/v order whatever the operand or computation order, axis,
// stacked shape); for the attention sites the layer and scale, and the errors with their text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "fusers/plan.h"
#include "ir/load.h"
#include "ir/op_defs.h"

namespace fuselm::fusers {
namespace fusers_test {

constexpr int64_t kHid = 32, kInter = 64, kHeads = 4, kHeadDim = 8;

using Status = ReportEntry::Status;

ir::Graph fixture(const std::string& name) {
  return ir::load(std::string(FUSELM_SOURCE_DIR) + "/tests/cpp/data/fusers/" + name + ".json");
}

const ReportEntry* entry(const Report& r, const std::string& module, const std::string& fuser) {
  for (const auto& e : r.entries)
    if (e.module == module && e.fuser == fuser) return &e;
  return nullptr;
}

int count_op(const ir::Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

std::vector<const ir::Node*> all(const ir::Graph& g, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const auto& n : g.nodes)
    if (n.op == op) out.push_back(&n);
  return out;
}

const ir::Node& only(const ir::Graph& g, const std::string& op) {
  const auto found = all(g, op);
  if (found.size() != 1) throw std::runtime_error(std::to_string(found.size()) + " nodes " + op + ", expected one");
  return *found[0];
}

// The placeholder an argument reads: its target for a parameter, "" for None, "<op>" otherwise.
std::string param_of(const ir::Graph& g, const ir::Arg& a) {
  if (a.is_none()) return "";
  if (a.kind != ir::Arg::Kind::ref) return "<literal>";
  const ir::Node& n = g.nodes.at(a.ref);
  if (n.op != "placeholder" || n.placeholder_kind != "parameter") return "<" + n.op + ">";
  return n.target;
}

std::vector<int64_t> static_shape(const ir::TensorMeta& m) {
  std::vector<int64_t> s;
  for (const auto& d : m.shape) s.push_back(d.symbolic() ? -1 : d.value);
  return s;
}

// A module's one entry for fuser, asserted present with the given status.
const ReportEntry& expect_entry(const Plan& p, const std::string& module, const std::string& fuser, Status status) {
  const ReportEntry* e = entry(p.report, module, fuser);
  if (!e) throw std::runtime_error("no " + fuser + " entry for " + module);
  EXPECT_EQ(e->status, status) << module << " " << fuser << ": " << e->detail;
  return *e;
}

// ---------------------------------------------------------------- rms_norm

struct RmsCase {
  const char* fixture;
  const char* detail;
  const char* weight;  // parameter target, "" for none
  double eps, offset;
};

TEST(RmsNormFuser, VariantsFuseWithTheirEpsAndWeightForm) {
  // RmsLlama: fp32 upcast, cast back before w; RmsGemma: (1 + w) with the cast after; RmsNoWeight:
  // x·x for the square; RmsNoCast: no casts, w multiplied last.
  for (const auto& c : {RmsCase{"rms_llama", "eps=1e-06 width=32 weight=w", "block.weight", 1e-6, 0.0},
                        RmsCase{"rms_gemma", "eps=1e-06 width=32 weight=1+w", "block.weight", 1e-6, 1.0},
                        RmsCase{"rms_no_weight", "eps=1e-05 width=32 weight=none", "", 1e-5, 0.0},
                        RmsCase{"rms_no_cast", "eps=3e-05 width=32 weight=w", "block.w", 3e-5, 0.0}}) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    const Plan p = apply(g);
    EXPECT_TRUE(p.report.errors.empty());
    EXPECT_EQ(expect_entry(p, "block", "rms_norm", Status::fused).detail, c.detail);
    EXPECT_EQ(p.report.totals.at("rms_norm"), std::make_pair(1, 1));
    const ir::Node& n = only(p.graph, "fuselm.rms_norm.default");
    ASSERT_EQ(n.args.size(), 4u);
    // x is the module's input, through the fp32 upcast at most: the fused op recomputes the rest.
    int x = n.args[0].ref, hops = 0;
    for (; p.graph.nodes.at(x).op != "placeholder" && hops < 4; ++hops) x = p.graph.nodes.at(x).args[0].ref;
    EXPECT_EQ(p.graph.nodes.at(x).placeholder_kind, "input");
    EXPECT_LE(hops, 1);
    EXPECT_EQ(static_shape(n.out), (std::vector<int64_t>{1, -1, kHid}));
    EXPECT_EQ(param_of(p.graph, n.args[1]), c.weight);
    EXPECT_DOUBLE_EQ(n.args[2].f, c.eps);
    EXPECT_DOUBLE_EQ(n.args[3].f, c.offset);
    // The norm's own arithmetic is gone.
    EXPECT_EQ(count_op(p.graph, "aten.rsqrt.default"), 0);
    EXPECT_EQ(count_op(p.graph, "aten.mean.dim"), 0);
    EXPECT_TRUE(p.weights.empty());
    EXPECT_LT(p.report.nodes_after, p.report.nodes_before);
  }
}

TEST(RmsNormFuser, EpsIsReadPerInstance) {
  // Two modules of one class, eps 1e-6 and 1e-3: eps is a literal of the structure signature, so
  // b is matched on its own rather than served a's cached plan.
  const Plan p = apply(fixture("rms_two_eps"));
  EXPECT_EQ(expect_entry(p, "a", "rms_norm", Status::fused).detail, "eps=1e-06 width=32 weight=w");
  const ReportEntry& b = expect_entry(p, "b", "rms_norm", Status::fused);
  EXPECT_EQ(b.detail, "eps=0.001 width=32 weight=w");
  EXPECT_FALSE(b.cached);
  const auto norms = all(p.graph, "fuselm.rms_norm.default");
  ASSERT_EQ(norms.size(), 2u);
  EXPECT_EQ(param_of(p.graph, norms[0]->args[1]), "a.weight");
  EXPECT_DOUBLE_EQ(norms[0]->args[2].f, 1e-6);
  EXPECT_EQ(param_of(p.graph, norms[1]->args[1]), "b.weight");
  EXPECT_DOUBLE_EQ(norms[1]->args[2].f, 1e-3);
  // b normalizes a's output: the fp32 casts between them were no-ops the capture did not keep.
  EXPECT_EQ(norms[1]->args[0].ref, norms[0]->index);
}

TEST(RmsNormFuser, NonRmsNormsAndGatedNormsAreNotFused) {
  struct Case {
    const char *fixture, *reason;
  };
  for (const auto& c :
       {Case{"rms_hand_layer_norm", "x - mean(x) is squared: a mean-subtracting norm (LayerNorm), not an RMSNorm"},
        Case{"rms_gated_before", "the module also computes aten.silu.default ('silu'): not a plain RMSNorm (gated?)"},
        Case{"rms_gated_after", "the module also computes aten.silu.default ('silu'): not a plain RMSNorm (gated?)"}}) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    const Plan p = apply(g);
    EXPECT_EQ(expect_entry(p, "block", "rms_norm", Status::rejected).detail, c.reason);
    EXPECT_EQ(p.report.totals.at("rms_norm"), std::make_pair(0, 1));
    EXPECT_EQ(count_op(p.graph, "fuselm.rms_norm.default"), 0);
    EXPECT_EQ(count_op(p.graph, "aten.rsqrt.default"), 1);
    EXPECT_EQ(p.graph.nodes.size(), g.nodes.size());
  }
  // nn.LayerNorm captures as one aten op with no rsqrt: not a candidate, nothing listed.
  const ir::Graph g = fixture("rms_torch_layer_norm");
  EXPECT_EQ(count_op(g, "aten.layer_norm.default"), 1);
  const Plan p = apply(g);
  EXPECT_EQ(entry(p.report, "block", "rms_norm"), nullptr);
  EXPECT_EQ(p.report.totals.at("rms_norm"), std::make_pair(0, 0));
  EXPECT_EQ(count_op(p.graph, "aten.layer_norm.default"), 1);
}

// ---------------------------------------------------------------- glu

struct GluCase {
  const char *fixture, *detail, *act;
  bool down, bias;
};

TEST(GluFuser, VariantsStackGateAndUp) {
  for (const auto& c : {GluCase{"glu_silu", "act=silu down=yes rows=2x64", "silu", true, false},
                        // u * act(g): the gate is the activated operand, whatever the order.
                        GluCase{"glu_reversed", "act=silu down=yes rows=2x64", "silu", true, false},
                        GluCase{"glu_no_down", "act=silu down=no rows=2x64", "silu", false, false},
                        GluCase{"glu_gelu", "act=gelu down=yes rows=2x64", "gelu", true, false},
                        GluCase{"glu_gelu_tanh_bias", "act=gelu_tanh down=yes rows=2x64", "gelu_tanh", true, true}}) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    // The capture kept the toy's operand order: the activated gate is the multiply's second
    // operand exactly in the reversed toy, so that case tests what it names.
    const ir::Node& mul = only(g, "aten.mul.Tensor");
    const bool act_second = g.nodes.at(mul.args[1].ref).op.find("gelu") != std::string::npos ||
                            g.nodes.at(mul.args[1].ref).op == "aten.silu.default";
    EXPECT_EQ(act_second, std::string(c.fixture) == "glu_reversed");
    const Plan p = apply(g);
    EXPECT_TRUE(p.report.errors.empty());
    EXPECT_EQ(expect_entry(p, "block", "glu", Status::fused).detail, c.detail);
    ASSERT_EQ(p.weights.size(), c.bias ? 2u : 1u);
    const WeightTransform& w = p.weights[0];
    EXPECT_EQ(w.target, "block.__fused_gate_up.weight");
    EXPECT_EQ(w.source_targets, (std::vector<std::string>{"block.gate_proj.weight", "block.up_proj.weight"}));
    EXPECT_EQ(w.axis, 0);
    EXPECT_EQ(w.shape, (std::vector<int64_t>{2 * kInter, kHid}));
    EXPECT_EQ(w.shard, Shard::column);
    ASSERT_EQ(w.sections.size(), 2u);
    EXPECT_EQ(w.sections[0].role, "gate");
    EXPECT_EQ(w.sections[1].role, "up");
    EXPECT_EQ(w.sections[0].size(), kInter);
    if (c.bias) {
      EXPECT_EQ(p.weights[1].target, "block.__fused_gate_up.bias");
      EXPECT_EQ(p.weights[1].source_targets, (std::vector<std::string>{"block.gate_proj.bias", "block.up_proj.bias"}));
      EXPECT_EQ(p.weights[1].shape, (std::vector<int64_t>{2 * kInter}));
    }
    // One GEMM over the stacked weight, then act_and_mul; the down projection (when there is one)
    // is the only other linear and is marked row parallel.
    const ir::Node& am = only(p.graph, "fuselm.act_and_mul.default");
    EXPECT_EQ(am.args[1].s, c.act);
    EXPECT_EQ(static_shape(am.out), (std::vector<int64_t>{1, -1, kInter}));
    const ir::Node& gu = p.graph.nodes.at(am.args[0].ref);
    ASSERT_EQ(gu.op, "aten.linear.default");
    EXPECT_EQ(param_of(p.graph, gu.args[1]), "block.__fused_gate_up.weight");
    EXPECT_EQ(param_of(p.graph, gu.args[2]), c.bias ? "block.__fused_gate_up.bias" : "");
    EXPECT_EQ(static_shape(gu.out), (std::vector<int64_t>{1, -1, 2 * kInter}));
    EXPECT_EQ(count_op(p.graph, "aten.linear.default"), c.down ? 2 : 1);
    for (const char* op : {"aten.silu.default", "aten.gelu.default", "aten.mul.Tensor"}) EXPECT_EQ(count_op(p.graph, op), 0) << op;
    if (c.down) {
      ASSERT_EQ(p.shards.size(), 1u);
      EXPECT_EQ(p.shards[0].target, "block.down_proj.weight");
      EXPECT_EQ(p.shards[0].shard, Shard::row);
      EXPECT_EQ(p.shards[0].axis, 1);
    } else {
      EXPECT_TRUE(p.shards.empty());
    }
  }
}

TEST(GluFuser, Conv1DStacksAlongItsOutputColumns) {
  // GPT-2's Conv1D keeps weights [K, N]: gate and up stack along dim 1, biases along dim 0, and
  // the stacked GEMM is an addmm.
  const Plan p = apply(fixture("glu_conv1d"));
  EXPECT_EQ(expect_entry(p, "block", "glu", Status::fused).detail, "act=silu down=yes conv1d rows=2x64");
  ASSERT_EQ(p.weights.size(), 2u);
  EXPECT_EQ(p.weights[0].source_targets, (std::vector<std::string>{"block.c_gate.weight", "block.c_up.weight"}));
  EXPECT_EQ(p.weights[0].axis, 1);
  EXPECT_EQ(p.weights[0].shape, (std::vector<int64_t>{kHid, 2 * kInter}));
  EXPECT_EQ(p.weights[1].source_targets, (std::vector<std::string>{"block.c_gate.bias", "block.c_up.bias"}));
  EXPECT_EQ(p.weights[1].axis, 0);
  EXPECT_EQ(p.weights[1].shape, (std::vector<int64_t>{2 * kInter}));
  const ir::Node& am = only(p.graph, "fuselm.act_and_mul.default");
  const ir::Node& mm = p.graph.nodes.at(am.args[0].ref);
  ASSERT_EQ(mm.op, "aten.addmm.default");
  EXPECT_EQ(param_of(p.graph, mm.args[0]), "block.__fused_gate_up.bias");
  EXPECT_EQ(param_of(p.graph, mm.args[2]), "block.__fused_gate_up.weight");
  EXPECT_EQ(count_op(p.graph, "aten.addmm.default"), 2);  // the stacked one and c_down
  ASSERT_EQ(p.shards.size(), 1u);
  EXPECT_EQ(p.shards[0].target, "block.c_down.weight");
  EXPECT_EQ(p.shards[0].axis, 0);  // Conv1D [K, N]: row parallel splits dim 0
}

TEST(GluFuser, RejectsDropoutBilinearAndPlainMlp) {
  struct Case {
    const char *fixture, *reason;
  };
  for (const auto& c : {Case{"glu_dropout",
                             "aten.dropout.default is not an activation with a fused act-and-mul (silu, gelu, gelu_tanh)"},
                        Case{"glu_bilinear", "the gating multiply has no activation: linear(x) · linear(x) is bilinear, not a GLU"},
                        Case{"glu_plain_mlp", "plain MLP: linear → activation → linear with no gating multiply"}}) {
    SCOPED_TRACE(c.fixture);
    const ir::Graph g = fixture(c.fixture);
    const Plan p = apply(g);
    EXPECT_EQ(expect_entry(p, "block", "glu", Status::rejected).detail, c.reason);
    EXPECT_EQ(p.report.totals.at("glu"), std::make_pair(0, 1));
    EXPECT_TRUE(p.weights.empty());
    EXPECT_EQ(count_op(p.graph, "fuselm.act_and_mul.default"), 0);
    EXPECT_EQ(p.graph.nodes.size(), g.nodes.size());
  }
}

// ---------------------------------------------------------------- qkv and packed_qkv

// The stacked [Q;K;V] weight, its one GEMM and the split with sizes n, whose pieces feed the
// operands the three projections fed.
void expect_qkv(const Plan& p, const std::vector<std::string>& sources, const std::vector<int64_t>& n) {
  ASSERT_EQ(p.weights.size(), 1u);
  const WeightTransform& w = p.weights[0];
  EXPECT_EQ(w.target, "block.__fused_qkv.weight");
  EXPECT_EQ(w.source_targets, sources);
  EXPECT_EQ(w.axis, 0);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{n[0] + n[1] + n[2], kHid}));
  EXPECT_EQ(w.shard, Shard::column);
  ASSERT_EQ(w.sections.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(w.sections[r].role, std::string(1, "qkv"[r]));
    EXPECT_EQ(w.sections[r].size(), n[r]);
    EXPECT_EQ(w.sections[r].head_dim, kHeadDim);
  }
  const ir::Node& sp = only(p.graph, "aten.split_with_sizes.default");
  ASSERT_EQ(sp.args[1].list.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sp.args[1].list[r].i, n[r]);
  EXPECT_EQ(sp.args[2].i, -1);
  const ir::Node& lin = p.graph.nodes.at(sp.args[0].ref);
  ASSERT_EQ(lin.op, "aten.linear.default");
  EXPECT_EQ(param_of(p.graph, lin.args[1]), "block.__fused_qkv.weight");
  for (const auto& s : sources)
    for (const auto& node : p.graph.nodes) EXPECT_NE(node.target, s) << "source still read";
}

TEST(QkvFuser, RolesComeFromDataflowNotOrderAndExtraProjectionsStay) {
  // Computed in v, k, q order, GQA widths (4 q heads, 2 kv heads), beside a projection of width 1
  // that gates the output.
  const ir::Graph g = fixture("qkv_vkq_extra");
  std::vector<std::string> order;  // the captured projections, in graph order
  for (const auto* n : all(g, "aten.linear.default")) order.push_back(param_of(g, n->args[1]));
  EXPECT_EQ(order, (std::vector<std::string>{"block.v_proj.weight", "block.k_proj.weight", "block.q_proj.weight",
                                             "block.o_proj.weight", "block.extra.weight"}));
  const Plan p = apply(g);
  EXPECT_TRUE(p.report.errors.empty());
  EXPECT_EQ(expect_entry(p, "block", "qkv", Status::fused).detail,
            "rows=32+16+16 per-rank=[4/tp*8,max(1,2/tp)*8,max(1,2/tp)*8] out=row");
  expect_qkv(p, {"block.q_proj.weight", "block.k_proj.weight", "block.v_proj.weight"}, {32, 16, 16});
  EXPECT_EQ(p.weights[0].sections[1].heads, 2);
  // The extra projection is kept, and so is o_proj, row parallel.
  int extra = 0;
  for (const auto* n : all(p.graph, "aten.linear.default")) extra += param_of(p.graph, n->args[1]) == "block.extra.weight";
  EXPECT_EQ(extra, 1);
  EXPECT_EQ(count_op(p.graph, "aten.linear.default"), 3);  // stacked, extra, o_proj
  ASSERT_EQ(p.shards.size(), 1u);
  EXPECT_EQ(p.shards[0].target, "block.o_proj.weight");
  EXPECT_EQ(p.shards[0].shard, Shard::row);
  EXPECT_EQ(p.shards[0].axis, 1);
  // Each operand reads its own piece: q ← 0, k ← 1, v ← 2 through the views.
  const ir::Node& att = only(p.graph, "fuselm.attention.default");
  for (int r = 0; r < 3; ++r) {
    int cur = att.args[r].ref;
    while (p.graph.nodes.at(cur).op != "getitem") cur = p.graph.nodes.at(cur).args[0].ref;
    EXPECT_EQ(p.graph.nodes.at(cur).args[1].i, r) << "operand " << r;
  }
}

TEST(QkvFuser, QkNormsOfBothKindsAreOnTheWay) {
  // Per head (Qwen3: normed over the head size after the view) and over the whole width before
  // the view (OLMo 2): the walk back from q and k passes through the norms, which fuse too.
  struct Case {
    const char* fixture;
    int64_t width;
  };
  for (const auto& c : {Case{"qkv_norm_per_head", kHeadDim}, Case{"qkv_norm_full_width", kHeads * kHeadDim}}) {
    SCOPED_TRACE(c.fixture);
    const Plan p = apply(fixture(c.fixture));
    EXPECT_TRUE(p.report.errors.empty());
    // No output projection in this toy: nothing to mark row parallel.
    EXPECT_EQ(expect_entry(p, "block", "qkv", Status::fused).detail,
              "rows=32+32+32 per-rank=[4/tp*8,max(1,4/tp)*8,max(1,4/tp)*8] out=none");
    expect_qkv(p, {"block.qkv.0.weight", "block.qkv.1.weight", "block.qkv.2.weight"}, {32, 32, 32});
    const std::string norm = "eps=1e-06 width=" + std::to_string(c.width) + " weight=w";
    EXPECT_EQ(expect_entry(p, "block.q_norm", "rms_norm", Status::fused).detail, norm);
    EXPECT_EQ(expect_entry(p, "block.k_norm", "rms_norm", Status::fused).detail, norm);
    const auto norms = all(p.graph, "fuselm.rms_norm.default");
    ASSERT_EQ(norms.size(), 2u);
    EXPECT_EQ(param_of(p.graph, norms[0]->args[1]), "block.q_norm.weight");
    EXPECT_EQ(param_of(p.graph, norms[1]->args[1]), "block.k_norm.weight");
    EXPECT_EQ(static_shape(p.graph.nodes.at(norms[0]->args[1].ref).out), (std::vector<int64_t>{c.width}));
  }
}

TEST(PackedQkvFuser, MqaPackedIsCutOnceWithItsSections) {
  // GPTBigCode multi_query: c_attn (bias) cut (32, 8, 8) after an unsqueeze; c_proj reached behind
  // dropout and gelu.
  const Plan p = apply(fixture("qkv_mqa_packed"));
  EXPECT_TRUE(p.report.errors.empty());
  EXPECT_EQ(expect_entry(p, "block", "packed_qkv", Status::fused).detail,
            "bias sections=q:4x8+k:1x8+v:1x8 per-rank=[4/tp*8,8,8] out=row");
  EXPECT_EQ(entry(p.report, "block", "qkv"), nullptr);  // the module is rewritten once
  EXPECT_TRUE(p.weights.empty());                       // already one GEMM
  const ir::Node& sp = only(p.graph, "aten.split_with_sizes.default");
  ASSERT_EQ(sp.args[1].list.size(), 3u);
  EXPECT_EQ(sp.args[1].list[0].i, 32);
  EXPECT_EQ(sp.args[1].list[1].i, 8);
  EXPECT_EQ(sp.args[1].list[2].i, 8);
  EXPECT_EQ(sp.args[2].i, -1);
  ASSERT_EQ(p.shards.size(), 3u);
  std::map<std::string, const ShardNote*> by;
  for (const auto& s : p.shards) by[s.target] = &s;
  ASSERT_TRUE(by.count("block.c_attn.weight") && by.count("block.c_attn.bias") && by.count("block.c_proj.weight"));
  const ShardNote& w = *by["block.c_attn.weight"];
  EXPECT_EQ(w.shard, Shard::column);
  ASSERT_EQ(w.sections.size(), 3u);
  EXPECT_EQ(w.sections[0].heads, kHeads);
  EXPECT_EQ(w.sections[1].heads, 1);
  EXPECT_EQ(w.sections[2].heads, 1);
  EXPECT_EQ(by["block.c_proj.weight"]->shard, Shard::row);
  EXPECT_EQ(by["block.c_proj.weight"]->axis, 1);
}

TEST(PackedQkvFuser, PerHeadSplitIsNeitherPackedNorThree) {
  const ir::Graph g = fixture("qkv_per_head_split");
  const Plan p = apply(g);
  EXPECT_EQ(expect_entry(p, "block", "packed_qkv", Status::rejected).detail,
            "the projection is viewed per head ([..., 4, 24]) before it is split: interleaved per head, not packed QKV");
  EXPECT_EQ(expect_entry(p, "block", "qkv", Status::rejected).detail,
            "one projection feeds several of q, k, v: a packed projection (packed_qkv), not three");
  EXPECT_EQ(expect_entry(p, "block", "attention", Status::fused).detail,
            "layer=0 (call order) scale=0.353553 (op argument) heads=4/4x8 mask=causal");
  EXPECT_TRUE(p.weights.empty());
  EXPECT_TRUE(p.shards.empty());
  EXPECT_EQ(p.graph.nodes.size(), g.nodes.size());
}

// ---------------------------------------------------------------- rope

// The Rope toy: q and k of 4 heads of 8, each x·cos + rotate_half(x)·sin with an in-module table
// (its own cat([f, f]) is no candidate); partial rotates the first 4 of each head; interleaved is
// GPT-J's rotate_every_two (a stack of pairs flattened back).
TEST(RopeFuser, EachRotatedTensorBecomesOneRopeOp) {
  for (const auto& [name, detail, rotated_by] :
       {std::tuple{"rope_half", "pairing=half sites=2 width=8", "aten.transpose.int"},
        std::tuple{"rope_partial", "pairing=half sites=2 width=4", "aten.slice.Tensor"},
        std::tuple{"rope_interleaved", "pairing=interleaved sites=2 width=8", "aten.transpose.int"}}) {
    SCOPED_TRACE(name);
    const ir::Graph g = fixture(name);
    const Plan p = apply(g);
    EXPECT_TRUE(p.report.errors.empty());
    EXPECT_EQ(expect_entry(p, "block", "rope", Status::fused).detail, detail);
    const auto ropes = all(p.graph, "fuselm.rope.default");
    ASSERT_EQ(ropes.size(), 2u);
    for (const ir::Node* n : ropes) {
      ASSERT_EQ(n->args.size(), 4u);
      EXPECT_EQ(p.graph.nodes.at(n->args[0].ref).op, rotated_by);  // x: the head-split q/k or its slice
      EXPECT_EQ(p.graph.nodes.at(n->args[1].ref).op, "aten.unsqueeze.default");  // cos[None, None]
      EXPECT_EQ(p.graph.nodes.at(n->args[2].ref).op, "aten.unsqueeze.default");
      EXPECT_EQ(n->args[3].s, std::string(name) == "rope_interleaved" ? "interleaved" : "half");
    }
    EXPECT_NE(ropes[0]->args[0].ref, ropes[1]->args[0].ref) << "q and k are rotated each";
    EXPECT_EQ(count_op(p.graph, "aten.neg.default"), 0) << "rotate_half's neg is dead";
    const char* rot = std::string(name) == "rope_interleaved" ? "aten.stack.default" : "aten.cat.default";
    EXPECT_EQ(count_op(p.graph, rot), count_op(g, rot) - 2) << "q's and k's rotation are dead";
  }
}

TEST(RopeFuser, AnotherHalfNegatedIsNotRotateHalf) {
  const ir::Graph g = fixture("rope_wrong_half");
  const Plan p = apply(g);
  EXPECT_EQ(expect_entry(p, "block", "rope", Status::rejected).detail,
            "cat(-x[..., :4], x[..., 4:]) over dim 3 is not rotate_half of width 8");
  EXPECT_EQ(count_op(p.graph, "fuselm.rope.default"), 0);
  EXPECT_EQ(p.graph.nodes.size(), g.nodes.size());
}

// ---------------------------------------------------------------- softcap

// The Softcap toy: a projection (times 4) soft-capped as Gemma 2 writes it, y / 30; tanh; · 30.
// `two` caps the result again with 50.0 · tanh(z / 50.0) (the factor first).
TEST(SoftcapFuser, DivTanhMulBySameScalarBecomesOneOp) {
  for (const auto& [name, detail, caps] : {std::tuple{"softcap_gemma2", "cap=30 sites=1", std::vector<double>{30}},
                                           std::tuple{"softcap_two", "sites=2", std::vector<double>{30, 50}}}) {
    SCOPED_TRACE(name);
    const ir::Graph g = fixture(name);
    const Plan p = apply(g);
    EXPECT_TRUE(p.report.errors.empty());
    EXPECT_EQ(expect_entry(p, "block", "softcap", Status::fused).detail, detail);
    const auto ops = all(p.graph, "fuselm.softcap.default");
    ASSERT_EQ(ops.size(), caps.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      ASSERT_EQ(ops[i]->args.size(), 2u);
      EXPECT_EQ(ops[i]->args[1].kind, ir::Arg::Kind::real);
      EXPECT_EQ(ops[i]->args[1].f, caps[i]);
      // x: the scaled projection, or the first cap's result for the second site
      EXPECT_EQ(p.graph.nodes.at(ops[i]->args[0].ref).op, i == 0 ? "aten.mul.Tensor" : "fuselm.softcap.default");
    }
    EXPECT_EQ(count_op(p.graph, "aten.tanh.default"), 0) << "the tanh is dead";
    EXPECT_EQ(count_op(p.graph, "aten.div.Tensor"), 0) << "the quotient is dead";
    EXPECT_EQ(p.graph.outputs.size(), 1u);
    EXPECT_EQ(p.graph.nodes.at(p.graph.outputs[0]).op, "fuselm.softcap.default");
  }
}

TEST(SoftcapFuser, OtherFactorsAndOtherReadersAreLeftAlone) {
  for (const auto& [name, reason] :
       {std::tuple{"softcap_other_factor", "tanh(x / 30) is multiplied by 20, not the cap"},
        std::tuple{"softcap_tanh_shared", "tanh(x / 30) is read by something else than one product"},
        std::tuple{"softcap_div_shared", "x / 30 is read by something else than the tanh"}}) {
    SCOPED_TRACE(name);
    const ir::Graph g = fixture(name);
    const Plan p = apply(g);
    EXPECT_EQ(expect_entry(p, "block", "softcap", Status::rejected).detail, reason);
    EXPECT_EQ(count_op(p.graph, "fuselm.softcap.default"), 0);
    EXPECT_EQ(count_op(p.graph, "aten.tanh.default"), 1);
    EXPECT_EQ(count_op(p.graph, "aten.div.Tensor"), 1);
  }
}

// ---------------------------------------------------------------- attention

TEST(AttentionFuser, ScaleIsTheOpArgumentNotTheModuleAttribute) {
  // ScaledAttn keeps scaling = head_dim**-0.5 as a decoy; the call passes: OPT 1.0 (q pre-scaled),
  // Gemma 2 query_pre_attn_scalar**-0.5 with 24, DeepSeek-V3 yarn head_dim**-0.5 · mscale² with
  // mscale = 0.1 · ln(40) + 1.
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  struct Case {
    const char* fixture;
    double scale;
    const char* shown;
  };
  for (const auto& c : {Case{"attn_scale_opt", 1.0, "1"}, Case{"attn_scale_gemma2", 1.0 / std::sqrt(24.0), "0.204124"},
                        Case{"attn_scale_yarn", mscale * mscale / std::sqrt(8.0), "0.662508"}}) {
    SCOPED_TRACE(c.fixture);
    const Plan p = apply(fixture(c.fixture));
    EXPECT_TRUE(p.report.errors.empty());
    EXPECT_EQ(expect_entry(p, "block", "attention", Status::fused).detail,
              std::string("layer=0 (call order) scale=") + c.shown + " (op argument) heads=4/4x8 mask=causal");
    ASSERT_EQ(p.attention.size(), 1u);
    const AttentionSite& s = p.attention[0];
    EXPECT_NEAR(s.scale, c.scale, 1e-6 * c.scale);
    EXPECT_GT(std::abs(s.scale - 1.0 / std::sqrt(8.0)), 1e-3);
    EXPECT_EQ(s.layer, 0);
    EXPECT_EQ(s.layer_source, "call order");
    EXPECT_EQ(s.q_heads, kHeads);
    EXPECT_EQ(s.kv_heads, kHeads);
    EXPECT_EQ(s.head_dim, kHeadDim);
    // OPT's q · scaling lies on the way back from q: still three projections.
    EXPECT_EQ(expect_entry(p, "block", "qkv", Status::fused).detail,
              "rows=32+32+32 per-rank=[4/tp*8,max(1,4/tp)*8,max(1,4/tp)*8] out=row");
  }
}

TEST(AttentionFuser, LongCatStyleIndicesComeFromTheModules) {
  // Four attention modules under one parent (LongCat-Flash: two per decoder layer): each site's
  // layer is its module's own layer_idx.
  const Plan p = apply(fixture("attn_longcat"));
  EXPECT_TRUE(p.report.errors.empty());
  EXPECT_EQ(p.report.totals.at("attention"), std::make_pair(4, 4));
  ASSERT_EQ(p.attention.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const std::string m = "attns." + std::to_string(i);
    EXPECT_EQ(expect_entry(p, m, "attention", Status::fused).detail,
              "layer=" + std::to_string(i) + " (call order) scale=0.353553 (op argument) heads=4/4x8 mask=causal");
    EXPECT_EQ(p.attention[i].layer, i);
  }
}

TEST(AttentionFuser, DuplicateAndMissingIndicesAreErrors) {
  struct Case {
    const char *fixture, *error;
  };
  for (const auto& c : {Case{"attn_duplicate", "layer index 0 is claimed by two attention modules: attns.0 and attns.1"},
                        Case{"attn_twice_in_module",
                             "module attns.0 calls attention twice for layer index 0: the KV cache holds one K/V per layer"},
                        Case{"attn_missing", "no attention module serves layer index 1 (the next, 2, is served by attns.1)"}}) {
    SCOPED_TRACE(c.fixture);
    const Plan p = apply(fixture(c.fixture));
    EXPECT_EQ(p.report.errors, std::vector<std::string>{c.error});
  }
}

// Two attention ops of one layer index that read the very same k and v (KV sharing, Gemma 3n / 4):
// one cache layer, before and after fusion. Another v, or another window, is still two K/V sets.
TEST(AttentionFuser, OpsWritingTheSameRowsShareOneLayer) {
  auto shared = [](bool same_v, int64_t window_b) {
    ir::Graph g = fixture("attn_duplicate");
    std::vector<size_t> att;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::OpDef* def = ir::find_op_def(g.nodes[i].op);
      if (def && def->kv != ir::KvRows::none) att.push_back(i);
    }
    EXPECT_EQ(att.size(), 2u);
    const ir::OpDef& def = *ir::find_op_def(g.nodes[att[0]].op);
    ir::Node &a = g.nodes[att[0]], &b = g.nodes[att[1]];
    b.args[def.arg("k")] = a.args[def.arg("k")];
    if (same_v) b.args[def.arg("v")] = a.args[def.arg("v")];
    b.args[def.arg("sliding_window")].i = window_b;
    return g;
  };
  const int64_t window = -1;  // the fixture's
  std::vector<std::string> errors;
  EXPECT_EQ(kv_layers(shared(true, window), errors).size(), 1u);
  EXPECT_TRUE(errors.empty()) << errors.front();
  const Plan p = apply(shared(true, window));
  EXPECT_TRUE(p.report.errors.empty());
  EXPECT_EQ(p.kv.size(), 1u);
  for (const auto& g : {shared(false, window), shared(true, 16)}) {
    errors.clear();
    kv_layers(g, errors);
    EXPECT_EQ(errors, std::vector<std::string>{"layer index 0 is claimed by two attention modules: attns.0 and attns.1"});
  }
}

TEST(AttentionFuser, UnresolvableScaleIsAnError) {
  // The scale argument a capture could not resolve (None): no default is guessed.
  const std::string err =
      "attention in module attns.0 (node 'attention'): the softmax scale is not a number at capture (argument None); "
      "refusing to guess a default";
  const Plan p = apply(fixture("attn_scale_unresolvable"));
  EXPECT_EQ(p.report.errors, std::vector<std::string>{err});
  EXPECT_EQ(expect_entry(p, "attns.0", "attention", Status::error).detail, err);
  EXPECT_TRUE(p.attention.empty());
}

}  // namespace fusers_test
}  // namespace fuselm::fusers

namespace fuselm::fusers {
namespace fusers_test {

// Each fuser registers itself from its own file; the registry orders them by their declared
// order. This fails when a fuser's object is dropped at link (the library not linked whole) or an
// order changes.
TEST(FuserRegistry, EveryFuserRegistersItselfInItsOrder) {
  std::vector<std::string> names;
  for (const Fuser* f : registry()) names.emplace_back(f->name());
  const std::vector<std::string> want = {"moe",        "mla",      "packed_qkv", "qkv",     "glu",
                                         "packed_glu", "rms_norm", "rope",       "softcap", "attention"};
  EXPECT_EQ(names, want);
}

}  // namespace fusers_test
}  // namespace fuselm::fusers
