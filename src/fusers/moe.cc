// MoE router   the ATen ops that pick each token's experts  →  one fuselm.moe_route op
//   anchor:     a fuselm.experts op whose top-k index comes from a top-k inside the module, with
//               the module the deepest one holding both (the MoE block, not its decoder layer)
//   top-k:      the index is getitem(topk(choice, k, -1, largest), 1): the last top-k in the graph
//   choice:     [masked_fill(·, ¬mask, -inf | 0 for positive scores) of grouped top-k]  ←  [scores + correction bias
//               (a [E] parameter: selection only)]  ←  softmax | sigmoid (logits)  ←  logits
//   logits:     aten.linear(x, W) with W a parameter (casts around either allowed; an upcast of x
//               to fp32 is reported); a gate with a bias is not modelled
//   groups:     mask = expand(scatter_(zeros_like(gs), 1, topk(gs, topk_group).indices, 1)), gs =
//               sum(topk(view(choice, [-1, G, E/G]), 2).values, -1)  (top2_sum) or
//               max(view(choice, [-1, G, E/G]), -1).values  (max)
//   weights:    [× scaling] ← [÷ (sum(w, -1) [+ eps])] ← topk values | gather(scores, ids) |
//               softmax(topk values over raw logits)  (softmax_of_topk)
//   output:     fuselm.moe_route(x, W, bias?, scoring, G, topk_group, group_score, k, renorm, eps,
//               scaling) -> (weights [T, k] f32, ids [T, k] i64), replacing the two values the
//               experts op reads; the router ops die. Anything else is declined with its reason
//               and the router runs as generic ops (the experts op is unchanged either way).
//   shared:     the expert added beside the routed ones (moe_shared.h), summed in: the experts op
//               becomes fuselm.experts_shared and replaces the add; reported but left alone when
//               its values are read elsewhere or the block adds anything else
//   report:     router kind, groups, renorm, scaling, correction bias, fp32 upcast, shared expert
#include <algorithm>
#include <climits>

#include "fusers/moe_router.h"
#include "fusers/moe_shared.h"
#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

bool is_view_node(const ir::Node& n) {
  return is_float_cast(n) || is_reshape(n);
}

int shared_root(const ir::Graph& g, int i) {
  while (i >= 0 && is_view_node(g.nodes[i])) i = ref_arg(g.nodes[i], 0);
  return i;
}

// The experts op this module reads the router of: the deepest module holding the experts op and
// its top-k (their module stacks part here), or -1.
int find_experts(const Subgraph& sg) {
  const ir::Graph& g = *sg.graph;
  int experts = -1;
  for (int i : sg.nodes) {
    if (g.nodes[i].op != "fuselm.experts.default") continue;
    const ir::Node* ids = node_of(g, ref_arg(g.nodes[i], 1));
    const int topk = ids && is_getitem(*ids, 1) ? ref_arg(*ids, 0) : -1;
    const auto& se = g.nodes[i].module_stack;
    const auto depth = std::find(se.begin(), se.end(), sg.module) - se.begin();
    if (topk < 0 || !sg.contains(topk)) {
      // No top-k to read: report it once, at the experts module's parent (the MoE block).
      if (se.size() == static_cast<size_t>(depth) + 2) experts = i;
      continue;
    }
    const auto& st = g.nodes[topk].module_stack;
    const bool deeper_e = static_cast<size_t>(depth) + 1 < se.size(), deeper_t = static_cast<size_t>(depth) + 1 < st.size();
    if (deeper_e && deeper_t && se[depth + 1] == st[depth + 1]) continue;  // a child holds both
    experts = i;
  }
  return experts;
}

class MoeFuser final : public Fuser {
 public:
  std::string_view name() const override { return "moe"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    const int experts = find_experts(sg);
    if (experts < 0) return why.not_applicable();
    auto r = read_router(g, sg, experts, why);
    if (!r) return std::nullopt;
    const ir::Node& ids = g.nodes[r->ids];
    const ir::Node& wts = g.nodes[r->weights];
    if (ids.out_kind != ir::Node::Out::tensor || wts.out_kind != ir::Node::Out::tensor)
      return why.reject("the router's outputs are not tensors");
    const SharedExpert sh = read_shared(g, sg, experts, r->x);
    std::string declined = sh.declined;
    const int hidden_in = ref_arg(g.nodes[experts], 0);
    if (sh.kind != "none" && declined.empty() &&
        (hidden_in < 0 || g.nodes[hidden_in].out.shape.size() != 2 || shared_root(g, hidden_in) != shared_root(g, r->x)))
      declined = "the experts do not read the gate's input as [T, H]";
    const bool sum_shared = sh.kind != "none" && declined.empty();

    Fusion f;
    f.replaces = {{r->weights, -1}, {r->ids, -1}};
    if (sum_shared) {
      f.replaces.push_back({sh.add, -1});
      if (sh.glu_mul >= 0) f.replaces.push_back({sh.glu_mul, -1});
    }
    // New nodes go before the earliest node replaced (a shared expert may run before the router),
    // so the input they read must come before it too: walk back through views, view it again.
    int first = INT32_MAX;
    for (const auto& [old, unused] : f.replaces) first = std::min(first, old);
    int x = r->x;
    while (x >= first && is_view_node(g.nodes[x])) x = ref_arg(g.nodes[x], 0);
    if (x >= first) return why.reject("the gate's input is computed after the values it replaces");
    ir::Arg x_arg = ref(x);
    if (x != r->x) {
      NewNode v;
      v.op = ops::view;
      v.args = {ref(x), shape_arg(g.nodes[r->x].out)};
      v.out = g.nodes[r->x].out;
      f.nodes.push_back(v);
      x_arg = ref(new_ref(0));
    }
    const int base = static_cast<int>(f.nodes.size());
    NewNode route;
    route.op = "fuselm.moe_route.default";
    ir::Arg renorm;
    renorm.kind = ir::Arg::Kind::boolean;
    renorm.b = r->renorm;
    route.args = {x_arg, ref(r->weight), r->correction >= 0 ? ref(r->correction) : none(), string(r->scoring),
                  integer(r->groups), integer(r->topk_group), string(r->group_score), integer(r->top_k),
                  renorm, real(r->renorm_eps), real(r->scaling)};
    route.out_kind = ir::Node::Out::tuple;
    route.outs = {ir::TensorMeta{ir::DType::f32, wts.out.shape}, ir::TensorMeta{ir::DType::i64, ids.out.shape}};
    f.nodes.push_back(route);
    for (int k = 0; k < 2; ++k) {
      NewNode gi;
      gi.op = ops::getitem;
      gi.args = {ref(new_ref(base)), integer(k)};
      gi.out = route.outs[k];
      f.nodes.push_back(gi);
    }
    f.replaces[0].second = new_ref(base + 1);
    f.replaces[1].second = new_ref(base + 2);
    if (sum_shared) {
      const ir::Node& old = g.nodes[experts];
      NewNode ex;
      ex.op = "fuselm.experts_shared.default";
      ex.args = old.args;
      ex.args[0] = x_arg;
      ex.args[1] = ref(new_ref(base + 2));
      ex.args[2] = ref(new_ref(base + 1));
      ex.args.resize(13);
      ex.args.push_back(sh.gate >= 0 ? ref(sh.gate) : none());
      ex.args.push_back(ref(sh.up));
      ex.args.push_back(ref(sh.down));
      ex.args.push_back(sh.scale >= 0 ? ref(sh.scale) : none());
      ex.args.push_back(string(sh.act));
      ex.out = old.out;
      f.nodes.push_back(ex);
      NewNode v;
      v.op = ops::view;
      v.args = {ref(new_ref(base + 3)), shape_arg(g.nodes[sh.add].out)};
      v.out = g.nodes[sh.add].out;
      f.nodes.push_back(v);
      f.replaces[2].second = new_ref(base + 4);
      // The shared GLU's multiply is claimed so that the glu fuser does not also stack its
      // weights; its readers are dead once the add is replaced.
      if (sh.glu_mul >= 0) f.replaces[3].second = new_ref(base + 3);
    }
    f.detail = fmt::format("router={} top_k={} groups={}", r->scoring, r->top_k,
                           r->groups > 1 ? fmt::format("{}/{} by {}", r->topk_group, r->groups, r->group_score) : "1");
    f.detail += fmt::format(" correction_bias={} renorm={} scaling={:g}{} shared={}", r->correction >= 0 ? "yes" : "no",
                            r->renorm ? "yes" : "no", r->scaling, r->upcast ? " fp32_upcast" : "", sh.kind);
    if (sh.kind != "none")
      f.detail += sum_shared ? fmt::format("({} {})", sh.gate >= 0 ? "glu" : "mlp", sh.act)
                             : " (not summed in: " + declined + ")";
    return f;
  }
};

}  // namespace

const Fuser& moe_fuser() {
  static const MoeFuser f;
  return f;
}

// Registry order 10: an MoE block: its router, before glu could claim the block's own multiply.
[[maybe_unused]] const bool kRegistered = register_fuser(moe_fuser(), 10);

}  // namespace fuselm::fusers

