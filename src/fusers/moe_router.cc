// The router reader of the moe fuser (moe_router.h; the signature is in moe.cc).
#include "fusers/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fusers/pattern.h"

namespace fuselm::fusers {

const ir::Node* node_of(const ir::Graph& g, int i) { return i >= 0 ? &g.nodes[i] : nullptr; }

bool is_getitem(const ir::Node& n, int64_t k) {
  return n.op == ops::getitem && n.args.size() == 2 && n.args[1].kind == ir::Arg::Kind::integer && n.args[1].i == k;
}

namespace {
// Views and casts that keep values (the mask plumbing of grouped top-k).
bool is_passthrough(const ir::Node& n) {
  using K = ir::ViewKind;
  return (ir::op_traits(n.op).cast && ref_arg(n, 0) >= 0) || is_view_of(n, {K::reshape, K::expand, K::unsqueeze});
}

int strip(const ir::Graph& g, int i) {
  while (i >= 0 && is_passthrough(g.nodes[i])) i = ref_arg(g.nodes[i], 0);
  return i;
}

// Follows casts and views that keep the last dimension's width (leading dims regrouped, a [E]
// bias unsqueezed to [1, E]): each row of experts keeps its values.
int strip_row_views(const ir::Graph& g, int i) {
  for (i = strip_casts(g, i); i >= 0; i = strip_casts(g, ref_arg(g.nodes[i], 0))) {
    const ir::Node& n = g.nodes[i];
    if (!is_view_of(n, {ir::ViewKind::reshape, ir::ViewKind::unsqueeze})) break;
    const int src = ref_arg(n, 0);
    if (src < 0 || n.out.shape.empty() || g.nodes[src].out.shape.empty()) break;
    const auto a = static_dim(n.out, -1), b = static_dim(g.nodes[src].out, -1);
    if (!a || a != b) break;
  }
  return i;
}

bool last_dim(const ir::Node& n, size_t i, size_t rank) {
  auto d = number_arg(n, i);
  return d && (*d == -1 || *d == static_cast<double>(rank) - 1);
}

// The ints of a list literal argument (a view's shape); empty when any entry is not a literal.
std::vector<int64_t> int_list(const ir::Node& n, size_t i) {
  std::vector<int64_t> out;
  if (i >= n.args.size() || n.args[i].kind != ir::Arg::Kind::list) return out;
  for (const auto& a : n.args[i].list) {
    if (a.kind != ir::Arg::Kind::integer) return {};
    out.push_back(a.i);
  }
  return out;
}

// Grouped top-k: reads G, topk_group and the group score from the mask of masked_fill(src, ¬mask).
bool read_groups(const ir::Graph& g, const Subgraph& sg, int mask, int src, Router& r, Why& why) {
  int m = mask;
  if (m >= 0 && (g.nodes[m].op == ops::bitwise_not || g.nodes[m].op == ops::logical_not))
    m = ref_arg(g.nodes[m], 0);
  else
    return why.reject("the top-k choice is masked by something other than a negated group mask");
  // The mask reads the scatter_ itself, or (when the graph names the mutated tensor by its
  // original value) the zeros_like it wrote into.
  int scatter = strip(g, m), zeros = -1;
  if (scatter >= 0 && g.nodes[scatter].op == ops::scatter_) {
    zeros = ref_arg(g.nodes[scatter], 0);
  } else {
    zeros = scatter;
    scatter = -1;
    if (zeros >= 0)
      for (int u : sg.users_of(zeros))
        if (g.nodes[u].op == ops::scatter_ && ref_arg(g.nodes[u], 0) == zeros) scatter = u;
  }
  if (zeros < 0 || g.nodes[zeros].op != ops::zeros_like)
    return why.reject("the group mask is not built on zeros_like(group scores)");
  if (scatter < 0 || number_arg(g.nodes[scatter], 3).value_or(0) != 1.0)
    return why.reject("the group mask is not set to 1 by scatter_ at the chosen groups");
  const ir::Node* gidx = node_of(g, ref_arg(g.nodes[scatter], 2));
  const ir::Node* gtop = gidx && is_getitem(*gidx, 1) ? node_of(g, ref_arg(*gidx, 0)) : nullptr;
  const int gs = ref_arg(g.nodes[zeros], 0);
  if (!gtop || gtop->op != ops::topk || ref_arg(*gtop, 0) != gs)
    return why.reject("the chosen groups are not a top-k of the group scores");
  r.topk_group = static_cast<int64_t>(number_arg(*gtop, 1).value_or(0));
  const ir::Node& s = g.nodes[gs];
  int view = -1;
  if (s.op == ops::sum) {
    const ir::Node* v2 = node_of(g, ref_arg(s, 0));
    const ir::Node* t2 = v2 && is_getitem(*v2, 0) ? node_of(g, ref_arg(*v2, 0)) : nullptr;
    if (!t2 || t2->op != ops::topk || number_arg(*t2, 1).value_or(0) != 2)
      return why.reject("group scores sum something other than each group's top 2");
    view = ref_arg(*t2, 0);
    r.group_score = "top2_sum";
  } else if (is_getitem(s, 0) && node_of(g, ref_arg(s, 0)) && g.nodes[ref_arg(s, 0)].op == ops::max_dim) {
    view = ref_arg(g.nodes[ref_arg(s, 0)], 0);
    r.group_score = "max";
  } else {
    return why.reject("group scores are neither the sum of each group's top 2 nor its max");
  }
  const ir::Node* v = node_of(g, view);
  const auto shape = v ? int_list(*v, 1) : std::vector<int64_t>{};
  if (!v || (v->op != ops::view && v->op != ops::reshape) || shape.size() != 3 ||
      strip_casts(g, ref_arg(*v, 0)) != strip_casts(g, src))
    return why.reject("group scores do not come from the scores the top-k chooses from, viewed as [-1, G, E/G]");
  r.groups = shape[1];
  return true;
}

// Steps over x^1 (pow by 1.0) and, where the values are non-negative, |x|: torch.norm(p=1) of the
// router's weights is pow(sum(pow(abs(w), 1)), 1), the weights' own sum (every weight the reader
// accepts is a softmax or sigmoid score, never negative).
int strip_unit_powers(const ir::Graph& g, int i, bool nonnegative) {
  for (i = strip_casts(g, i); i >= 0; i = strip_casts(g, ref_arg(g.nodes[i], 0))) {
    const ir::Node& n = g.nodes[i];
    const bool unit_power = n.op == ops::pow && number_arg(n, 1) == 1.0;
    if (!unit_power && !(nonnegative && n.op == ops::abs)) break;
  }
  return i;
}

// The weights the experts read, back to their source.
bool read_weights(const ir::Graph& g, int w, int topk, int scores, Router& r, Why& why) {
  w = strip_casts(g, w);
  const ir::Node* n = node_of(g, w);
  if (n && n->op == ops::mul) {
    for (int side = 0; side < 2; ++side)
      if (auto s = number_arg(*n, 1 - side); s && ref_arg(*n, side) >= 0) {
        r.scaling = *s;
        w = strip_casts(g, ref_arg(*n, side));
        n = node_of(g, w);
        break;
      }
    if (r.scaling == 1.0 && n && n->op == ops::mul)
      return why.reject("router weights are multiplied by a tensor, not a routed scaling factor");
  }
  if (n && (n->op == ops::div || n->op == ops::div_)) {
    const int num = ref_arg(*n, 0);
    int den = ref_arg(*n, 1);
    const ir::Node* d = node_of(g, den);
    if (d && d->op == ops::add && number_arg(*d, 1)) {
      r.renorm_eps = *number_arg(*d, 1);
      d = node_of(g, ref_arg(*d, 0));
    }
    d = node_of(g, strip_unit_powers(g, d ? d->index : -1, false));
    if (!d || d->op != ops::sum || strip_unit_powers(g, ref_arg(*d, 0), true) != strip_casts(g, num))
      return why.reject("router weights are divided by something other than their own sum");
    r.renorm = true;
    w = strip_casts(g, num);
    n = node_of(g, w);
  }
  if (n && (n->op == ops::softmax || n->op == ops::softmax_) && r.scoring.empty()) {
    const ir::Node* v = node_of(g, strip_casts(g, ref_arg(*n, 0)));
    if (!v || !is_getitem(*v, 0) || ref_arg(*v, 0) != topk)
      return why.reject("a softmax of router weights that are not the top-k logits");
    r.scoring = "softmax_of_topk";
    return true;
  }
  if (r.scoring.empty()) return why.reject("the top-k chooses from raw logits and no softmax follows it");
  if (n && is_getitem(*n, 0) && ref_arg(*n, 0) == topk) {
    if (r.correction >= 0) return why.reject("router weights are the corrected scores, not the scores");
    return true;
  }
  if (n && n->op == ops::gather && strip_casts(g, ref_arg(*n, 0)) == scores) {
    const ir::Node* idx = node_of(g, ref_arg(*n, 2));
    if (idx && is_getitem(*idx, 1) && ref_arg(*idx, 0) == topk && last_dim(*n, 1, 2)) return true;
  }
  return why.reject("router weights are neither the top-k values nor the scores gathered at the top-k indices");
}

// The linear gate behind the router scores `logits`: its [E, H] weight, no bias, reading the
// block's input (through an fp32 upcast or not).
bool read_gate(const ir::Graph& g, const Subgraph& sg, int logits, Router& r, Why& why) {
  const ir::Node* lin = node_of(g, logits);
  if (!lin || lin->op != ops::linear)
    return why.reject("the router scores do not come from a linear gate (dataflow does not reach one)");
  if (ref_arg(*lin, 2) >= 0) return why.reject("the gate linear has a bias, which the routing kernel does not model");
  r.weight = strip_casts(g, ref_arg(*lin, 1));
  if (!is_parameter(g, r.weight) || g.nodes[r.weight].out.shape.size() != 2)
    return why.reject("the gate weight is not a [E, H] parameter");
  const int x_in = ref_arg(*lin, 0);
  r.x = strip_casts(g, x_in);
  r.upcast = x_in != r.x;
  if (!sg.contains(r.x) && std::find(sg.inputs.begin(), sg.inputs.end(), r.x) == sg.inputs.end())
    return why.reject("the gate does not read the block's input");
  return true;
}

}  // namespace

std::optional<Router> read_router(const ir::Graph& g, const Subgraph& sg, int experts, Why& why) {
  Router r;
  r.ids = ref_arg(g.nodes[experts], 1);
  r.weights = ref_arg(g.nodes[experts], 2);
  const ir::Node* ids = node_of(g, r.ids);
  const int topk = ids && is_getitem(*ids, 1) ? ref_arg(*ids, 0) : -1;
  if (topk < 0 || g.nodes[topk].op != ops::topk)
    return why.reject("the experts' top-k index is not the indices of a top-k");
  if (!sg.contains(topk) || !sg.contains(r.ids) || !sg.contains(r.weights))
    return why.reject("the router's top-k or weights are outside the block");
  const ir::Node& t = g.nodes[topk];
  const int choice_in = ref_arg(t, 0);
  if (choice_in < 0 || !last_dim(t, 2, g.nodes[choice_in].out.shape.size()) ||
      !(t.args.size() < 4 || t.args[3].kind != ir::Arg::Kind::boolean || t.args[3].b))
    return why.reject("the top-k is not over the largest values of the last dimension");
  r.top_k = static_cast<int64_t>(number_arg(t, 1).value_or(0));
  int choice = strip_casts(g, choice_in);
  double masked_with = -std::numeric_limits<double>::infinity();
  if (const ir::Node* mf = node_of(g, choice); mf && mf->op == ops::masked_fill) {
    const auto fill = number_arg(*mf, 2);
    if (!fill || *fill > 0) return why.reject("the top-k choice is masked with other than -inf or 0");
    masked_with = *fill;
    choice = strip_casts(g, ref_arg(*mf, 0));
    if (!read_groups(g, sg, ref_arg(*mf, 1), choice, r, why)) return std::nullopt;
  }
  int scores = choice;
  if (const ir::Node* add = node_of(g, choice); add && add->op == ops::add) {
    for (int side = 0; side < 2; ++side) {
      const int p = strip_row_views(g, ref_arg(*add, side));
      if (is_parameter(g, p) && g.nodes[p].out.shape.size() == 1) {
        r.correction = p;
        scores = strip_row_views(g, ref_arg(*add, 1 - side));
      }
    }
    if (r.correction < 0) return why.reject("the top-k chooses from scores plus something other than a [E] bias");
  }
  int logits = scores;
  const ir::Node& sn = g.nodes[scores];
  if (sn.op == ops::softmax || sn.op == ops::softmax_ || sn.op == ops::sigmoid) {
    if (sn.op != ops::sigmoid && !last_dim(sn, 1, sn.out.shape.size()))
      return why.reject("the router softmax is not over the experts");
    r.scoring = sn.op == ops::sigmoid ? "sigmoid" : "softmax";
    logits = strip_casts(g, ref_arg(sn, 0));
  }
  // Masking with 0 instead of -inf excludes the same experts only when every score is positive.
  if (!std::isinf(masked_with) && (r.correction >= 0 || (r.scoring != "softmax" && r.scoring != "sigmoid")))
    return why.reject("the top-k choice is masked with {}, which excludes experts only for positive scores",
                      masked_with);
  if (!read_gate(g, sg, logits, r, why) || !read_weights(g, r.weights, topk, scores, r, why)) return std::nullopt;
  return r;
}

}  // namespace fuselm::fusers
