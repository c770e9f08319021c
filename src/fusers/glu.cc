// GLU   act(A·x) ⊙ (B·x) [→ D·]   →  one GEMM over [A;B] + fuselm.act_and_mul(gu, act)
//   anchor:   the module's own multiply of two tensors, one a projection and the other a
//             projection or a one-input function of one
//   A, B:     linear-likes (aten.linear, or GPT-2 Conv1D view·addmm·view) reading the same x, with
//             equal widths, parameter weights of one dtype, both or neither with a bias; either
//             operand order of ⊙
//   act:      silu | gelu | gelu_tanh, read from the graph; anything else (dropout, identity) is
//             not a GLU. A plain MLP (linear → activation → linear, no gating multiply) neither.
//   A projection cut in two halves (Phi-3's gate_up_proj) is packed_glu.cc's.
//   weights:  [A;B] stacked along the output axis (dim 0 for [N,K] weights, dim 1 for Conv1D
//             [K,N]); biases likewise. TP: column parallel by sections, rows split per rank as
//             [A_r; B_r]; the down projection (when present) row parallel (a ShardNote).
#include <algorithm>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

struct Roles {
  LinearLike gate, up;
  int act = -1;   // the activation node (-1: none)
  int mul = -1;
};

// An elementwise op a plain MLP's activation may be spelled with (ir::OpTraits::pointwise).
bool is_elementwise(const ir::Node& n) {
  const ir::OpTraits& t = ir::op_traits(n.op);
  return (t.pointwise && !t.in_place) || is_float_cast(n);
}

class GluFuser final : public Fuser {
 public:
  std::string_view name() const override { return "glu"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    std::vector<Roles> cands;
    for (int m : sg.own_of(ops::mul)) {
      const ir::Node& n = g.nodes[m];
      for (int order = 0; order < 2; ++order) {
        const int a = ref_arg(n, order), b = ref_arg(n, 1 - order);
        if (a < 0 || b < 0 || !sg.contains(b)) continue;
        auto up = as_linear(g, b);
        if (!up) continue;
        Roles r;
        r.up = *up;
        r.mul = m;
        if (auto gate = sg.contains(a) ? as_linear(g, a) : std::nullopt) {
          r.gate = *gate;  // no activation between: bilinear
        } else if (sg.contains(a) && is_elementwise_unary(g.nodes[a])) {
          auto gate = as_linear(g, ref_arg(g.nodes[a], 0));
          if (!gate || !sg.contains(gate->out)) continue;
          r.gate = *gate;
          r.act = a;
        } else {
          continue;
        }
        cands.push_back(r);
        break;
      }
    }
    if (cands.empty()) {
      if (auto plain = plain_mlp(sg)) return why.reject("{}", *plain);
      return why.not_applicable();
    }
    if (cands.size() > 1) return why.reject("found {} gating multiplies in one module", cands.size());
    const Roles& r = cands[0];
    if (r.act < 0) return why.reject("the gating multiply has no activation: linear(x) · linear(x) is bilinear, not a GLU");
    const auto act_or = act_and_mul_activation(g.nodes[r.act], why);
    if (!act_or) return std::nullopt;
    const std::string act = *act_or;
    if (r.gate.x != r.up.x) return why.reject("gate and up projections read different inputs");
    if (r.gate.kn != r.up.kn) return why.reject("gate and up projections have different weight layouts");
    if ((r.gate.bias >= 0) != (r.up.bias >= 0)) return why.reject("one of gate and up has a bias, the other not");
    if (g.nodes[r.gate.weight].out.dtype != g.nodes[r.up.weight].out.dtype)
      return why.reject("gate and up weights have different dtypes");

    const auto down_linear = down_projection(sg, r.mul);
    const bool down = down_linear.has_value();

    const int n_axis = r.gate.kn ? 1 : 0, k_axis = 1 - n_axis;
    const auto& wa = g.nodes[r.gate.weight].out;
    const auto& wb = g.nodes[r.up.weight].out;
    const auto na = static_dim(wa, n_axis), nb = static_dim(wb, n_axis);
    const auto ka = static_dim(wa, k_axis), kb = static_dim(wb, k_axis);
    if (!na || !nb || !ka || !kb) return why.reject("gate or up weight shape is not static");
    if (*na != *nb) return why.reject("gate width {} != up width {}", *na, *nb);
    if (*ka != *kb) return why.reject("gate input width {} != up input width {}", *ka, *kb);

    Fusion f;
    const LinearLike parts[] = {r.gate, r.up};
    const auto gu = stacked_linear(g, f, parts, "__fused_gate_up", why);
    if (!gu) return std::nullopt;
    for (auto& w : f.weights) w.sections = {HeadSection{"gate", *na, 1, false}, HeadSection{"up", *na, 1, false}};
    const ir::Node& mul = g.nodes[r.mul];
    NewNode am;
    am.op = "fuselm.act_and_mul.default";
    am.args = {ref(*gu), string(act)};
    am.out = r.gate.kn ? g.nodes[r.gate.addmm].out : mul.out;
    f.nodes.push_back(am);
    if (r.gate.kn) {
      NewNode v;
      v.op = ops::view;
      v.args = {ref(new_ref(static_cast<int>(f.nodes.size()) - 1)), shape_arg(mul.out)};
      v.out = mul.out;
      f.nodes.push_back(v);
    }
    f.replaces.push_back({r.mul, new_ref(static_cast<int>(f.nodes.size()) - 1)});
    if (down_linear) f.shards.push_back(ShardNote{down_linear->weight, {}, Shard::row, down_linear->kn ? 0 : 1, {}});
    f.detail = fmt::format("act={} down={}{} rows=2x{}", act, down ? "yes" : "no", r.gate.kn ? " conv1d" : "", *na);
    return f;
  }

 private:
  // "plain MLP: ..." when the module is the innermost one holding two linear-likes joined by
  // elementwise ops only, every path from the second leading back to the same first one.
  static std::optional<std::string> plain_mlp(const Subgraph& sg) {
    const ir::Graph& g = *sg.graph;
    for (int i : sg.nodes) {
      auto second = as_linear(g, i);
      if (!second || second->out != i) continue;
      std::vector<int> stack{second->x}, firsts;
      bool elementwise_only = true;
      int steps = 0;
      while (!stack.empty() && steps++ < 64) {
        const int v = stack.back();
        stack.pop_back();
        if (v < 0 || !sg.contains(v)) continue;
        if (auto first = as_linear(g, v); first && first->out == v) {
          if (std::find(firsts.begin(), firsts.end(), v) == firsts.end()) firsts.push_back(v);
          continue;
        }
        if (!is_elementwise(g.nodes[v])) {
          elementwise_only = false;
          break;
        }
        for (size_t k = 0; k < g.nodes[v].args.size(); ++k)
          if (ref_arg(g.nodes[v], k) >= 0) stack.push_back(ref_arg(g.nodes[v], k));
      }
      if (!elementwise_only || firsts.size() != 1) continue;
      // The innermost module holding both linears must be this one.
      const auto& a = g.nodes[firsts[0]].module_stack;
      const auto& b = g.nodes[i].module_stack;
      size_t common = 0;
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
      if (common == 0 || a[common - 1] != sg.module) continue;
      return std::string("plain MLP: linear → activation → linear with no gating multiply");
    }
    return std::nullopt;
  }
};

}  // namespace

const Fuser& glu_fuser() {
  static const GluFuser f;
  return f;
}

// Registry order 50: an MLP block: gate/up projections under one module.
[[maybe_unused]] const bool kRegistered = register_fuser(glu_fuser(), 50);

}  // namespace fuselm::fusers
