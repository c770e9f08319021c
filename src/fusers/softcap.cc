// Tanh soft-capping   y = c · tanh(x / c)   →  fuselm.softcap(x, c)
//   anchor:   each own aten.tanh of the module whose input is an own div(x, c) read by nothing else
//             and whose only user is an own mul of the tanh and c (either operand order), c one
//             literal number in both places (the cap: Gemma 2's final_logit_softcapping over the
//             logits, any model's `t / c; tanh; · c` on any tensor).
//   dtypes:   x and the three results f32 (a bf16 or f16 chain rounds between the ops; unfused keeps
//             torch's rounding).
//   rejected: a tanh between a div and a mul whose scalars differ, a div or tanh read elsewhere, a
//             divisor or factor that is a tensor (those are not candidates: a tanh alone is not).
//   composes: the three nodes belong to no other fuser's pattern, so it applies beside the module's
//             rewriting fusion; the driver's overlap check still holds.
//   Replaces three passes over the tensor (over the logits: 3 × vocab floats per token) by one.
#include <algorithm>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

struct Site {
  int x = -1, mul = -1;
  double cap = 0;
};

// The node's single user when sg owns it and its op is `op`, else -1.
int only_user(const Subgraph& sg, int v, std::string_view op) {
  const auto& us = sg.users_of(v);
  if (us.size() != 1 || !sg.owns(us[0]) || sg.node(us[0]).op != op) return -1;
  return us[0];
}

// A candidate: an own tanh reading an own div of a tensor by a literal number.
bool looks_softcap(const Subgraph& sg, int tanh) {
  const int div = ref_arg(sg.node(tanh), 0);
  if (div < 0 || !sg.owns(div) || sg.node(div).op != ops::div) return false;
  return ref_arg(sg.node(div), 0) >= 0 && number_arg(sg.node(div), 1).has_value();
}

std::optional<Site> softcap_site(const Subgraph& sg, int tanh, Why& why) {
  const ir::Graph& g = *sg.graph;
  const int div = ref_arg(g.nodes[tanh], 0);
  Site s;
  s.x = ref_arg(g.nodes[div], 0);
  s.cap = *number_arg(g.nodes[div], 1);
  if (only_user(sg, div, ops::tanh) != tanh) return why.reject("x / {} is read by something else than the tanh", s.cap);
  s.mul = only_user(sg, tanh, ops::mul);
  if (s.mul < 0) return why.reject("tanh(x / {}) is read by something else than one product", s.cap);
  const ir::Node& m = g.nodes[s.mul];
  const bool tanh_first = ref_arg(m, 0) == tanh;
  const auto factor = number_arg(m, tanh_first ? 1 : 0);
  if (!tanh_first && ref_arg(m, 1) != tanh) return why.reject("the product does not read tanh(x / {})", s.cap);
  if (!factor) return why.reject("tanh(x / {}) is multiplied by a tensor, not the cap", s.cap);
  if (*factor != s.cap) return why.reject("tanh(x / {}) is multiplied by {}, not the cap", s.cap, *factor);
  for (int v : {s.x, div, tanh, s.mul})
    if (g.nodes[v].out.dtype != DType::f32)
      return why.reject("{} is {}: the fused softcap runs f32 only", g.nodes[v].op, dtype_name(g.nodes[v].out.dtype));
  return s;
}

class SoftcapFuser final : public Fuser {
 public:
  std::string_view name() const override { return "softcap"; }
  bool composes() const override { return true; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    std::vector<Site> sites;
    bool candidate = false;
    for (int t : sg.own_of(ops::tanh)) {
      if (!looks_softcap(sg, t)) continue;
      candidate = true;
      auto s = softcap_site(sg, t, why);
      if (!s) return std::nullopt;
      sites.push_back(*s);
    }
    if (!candidate) return why.not_applicable();
    // New nodes in graph order: each goes right before the product it replaces.
    std::sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) { return a.mul < b.mul; });
    Fusion f;
    for (const Site& s : sites) {
      NewNode nn = op_node("fuselm.softcap.default", {{"input", ref(s.x)}, {"cap", real(s.cap)}});
      nn.out = sg.node(s.mul).out;
      nn.place_before = s.mul;
      f.replaces.push_back({s.mul, new_ref(static_cast<int>(f.nodes.size()))});
      f.nodes.push_back(std::move(nn));
    }
    const bool one_cap = std::all_of(sites.begin(), sites.end(), [&](const Site& s) { return s.cap == sites.front().cap; });
    f.detail = one_cap ? fmt::format("cap={} sites={}", sites.front().cap, sites.size()) : fmt::format("sites={}", sites.size());
    return f;
  }
};

}  // namespace

const Fuser& softcap_fuser() {
  static const SoftcapFuser f;
  return f;
}

// Registry order 90: composes: c·tanh(x/c) beside whatever the module's own fusion is.
[[maybe_unused]] const bool kRegistered = register_fuser(softcap_fuser(), 90);

}  // namespace fuselm::fusers
