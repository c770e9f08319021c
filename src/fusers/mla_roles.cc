// Role analysis of the mla fuser (mla_roles.h): walks the module's dataflow from its attention
// op's q, k and v operands; reads ops, dataflow and literal split sizes, never a name.
#include "fusers/mla_roles.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace fuselm::fusers::mla {
namespace {

// Views and casts between a projection and the attention op: the role walk looks through them.
bool is_view(const ir::Node& n) {
  using K = ir::ViewKind;
  return is_view_of(n, {K::reshape, K::transpose, K::unsqueeze, K::squeeze, K::permute, K::alias, K::expand, K::copy}) ||
         is_float_cast(n);
}

int strip_views(const ir::Graph& g, int i) {
  while (i >= 0 && is_view(g.nodes[i])) i = ref_arg(g.nodes[i], 0);
  return i;
}

bool last_dim(const ir::Graph& g, int node, int64_t dim) {
  const auto rank = static_cast<int64_t>(g.nodes[node].out.shape.size());
  return dim == -1 || (rank > 0 && dim == rank - 1);
}

// getitem(split_with_sizes(x, [a, b], last dim), index): the split node and index.
struct Piece {
  int split = -1;
  int64_t index = -1;
};
std::optional<Piece> as_piece(const ir::Graph& g, int i) {
  if (i < 0 || g.nodes[i].op != ops::getitem) return std::nullopt;
  const int s = ref_arg(g.nodes[i], 0);
  if (s < 0 || g.nodes[s].op != ops::split_with_sizes) return std::nullopt;
  const auto& sn = g.nodes[s];
  const int src = ref_arg(sn, 0);
  if (src < 0 || sn.args.size() < 3 || sn.args[1].list.size() != 2 || sn.args[2].kind != ir::Arg::Kind::integer ||
      !last_dim(g, src, sn.args[2].i) || g.nodes[i].args[1].kind != ir::Arg::Kind::integer)
    return std::nullopt;
  return Piece{s, g.nodes[i].args[1].i};
}

// Walking back from `start` inside the module: the projections reached (not walked past), the
// stop nodes reached, whether an rsqrt was on the way.
struct Walk {
  std::set<int> linears, stops;
  bool rsqrt = false;
};
template <class Stop>
Walk walk_back(const Subgraph& sg, int start, Stop stop) {
  const ir::Graph& g = *sg.graph;
  Walk w;
  std::set<int> seen;
  std::vector<int> stack{start};
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (v < 0 || !sg.contains(v) || !seen.insert(v).second) continue;
    if (stop(v)) {
      w.stops.insert(v);
      continue;
    }
    if (auto l = as_linear(g, v); l && l->out == v) {
      w.linears.insert(v);
      continue;
    }
    if (g.nodes[v].op == ops::rsqrt) w.rsqrt = true;
    for (const auto& a : g.nodes[v].args) {
      if (a.kind == ir::Arg::Kind::ref) stack.push_back(a.ref);
      for (const auto& x : a.list)
        if (x.kind == ir::Arg::Kind::ref) stack.push_back(x.ref);
    }
  }
  return w;
}

// The key's pieces along the head dim, in order (start or order, source): a concatenation, or a
// new tensor filled by copies into unit-step slices. nullopt with the reason otherwise.
std::optional<std::vector<std::pair<int64_t, int>>> key_pieces(const Subgraph& sg, int key, Why& why) {
  const ir::Graph& g = *sg.graph;
  std::vector<std::pair<int64_t, int>> pieces;
  const ir::Node& kn = g.nodes[key];
  if (kn.op == ops::cat && kn.args.size() >= 2 && kn.args[1].kind == ir::Arg::Kind::integer &&
      last_dim(g, key, kn.args[1].i)) {
    for (const auto& x : kn.args[0].list)
      if (x.kind == ir::Arg::Kind::ref) pieces.push_back({static_cast<int64_t>(pieces.size()), x.ref});
    if (pieces.size() != kn.args[0].list.size()) pieces.clear();
    return pieces;
  }
  if (kn.op != ops::new_empty)
    return why.reject("the key is neither a concatenation nor a new tensor filled by copies along the head dim");
  for (int u : sg.users_of(key)) {
    const ir::Node& un = g.nodes[u];
    if (un.op == ops::copy_) return why.reject("the key is written whole by a copy, not assembled");
    if (un.op != ops::slice || ref_arg(un, 0) != key) continue;
    if (un.args.size() < 5 || un.args[1].kind != ir::Arg::Kind::integer || !last_dim(g, key, un.args[1].i) ||
        un.args[2].kind != ir::Arg::Kind::integer || un.args[4].kind != ir::Arg::Kind::integer || un.args[4].i != 1)
      return why.reject("the key is filled through a slice that is not a unit-step range of the head dim");
    const auto& su = sg.users_of(u);
    if (su.size() != 1 || g.nodes[su[0]].op != ops::copy_ || ref_arg(g.nodes[su[0]], 0) != u)
      return why.reject("a slice of the key is not the target of exactly one copy");
    pieces.push_back({un.args[2].i, ref_arg(g.nodes[su[0]], 1)});
  }
  return pieces;
}

// v (piece 1 of the per-head split of up's output) and the key: [k_nope | k_rot] with k_nope
// piece 0 of that split. Sets r.up_split and r.k_rot.
bool find_value_and_key(const Subgraph& sg, Roles& r, Why& why) {
  const ir::Graph& g = *sg.graph;
  const ir::Node& att = g.nodes[r.att];
  const auto vp = as_piece(g, strip_views(g, ref_arg(att, 2)));
  if (!vp || vp->index != 1 || strip_views(g, ref_arg(g.nodes[vp->split], 0)) != r.up.out)
    return why.reject("v is not the second piece of a split of the up-projection along the head dim");
  r.up_split = vp->split;
  auto pieces = key_pieces(sg, strip_views(g, ref_arg(att, 1)), why);
  if (!pieces) return false;
  std::sort(pieces->begin(), pieces->end());
  if (pieces->size() != 2)
    return why.reject("the key has {} pieces along the head dim; expected k_nope and k_rot", pieces->size());
  const auto kp = as_piece(g, strip_views(g, (*pieces)[0].second));
  if (!kp || kp->split != r.up_split || kp->index != 0)
    return why.reject("the key's first piece is not the first piece of the up-projection's split");
  r.k_rot = strip_views(g, (*pieces)[1].second);
  return true;
}

// The latent (up's input, back through an RMSNorm to piece 0 of split(down(x))) and the rope key
// (piece 1 of the same split, through no projection). Sets r.latent, r.down_split and r.down.
bool find_latent(const Subgraph& sg, Roles& r, Why& why) {
  const ir::Graph& g = *sg.graph;
  auto is_piece = [&](int i) { return as_piece(g, i).has_value(); };
  r.latent = r.up.x;
  const Walk wl = walk_back(sg, r.latent, is_piece);
  if (wl.stops.size() != 1 || !wl.linears.empty())
    return why.reject("the up-projection's input does not come from one split piece alone");
  const auto lp = as_piece(g, *wl.stops.begin());
  if (lp->index != 0) return why.reject("the latent is not the first piece of its split");
  if (!wl.rsqrt) return why.reject("the latent reaches the up-projection without an RMSNorm");
  r.down_split = lp->split;
  const int down_out = strip_views(g, ref_arg(g.nodes[r.down_split], 0));
  auto down = as_linear(g, down_out);
  if (!down || down->out != down_out) return why.reject("the latent's split does not cut a projection's output");
  r.down = *down;
  const Walk wr = walk_back(sg, r.k_rot, is_piece);
  if (wr.stops.size() != 1 || !wr.linears.empty())
    return why.reject("the rope key does not come from one split piece alone");
  const auto rp = as_piece(g, *wr.stops.begin());
  if (rp->split != r.down_split || rp->index != 1)
    return why.reject("the rope key is not the second piece of the KV down-projection's split");
  return true;
}

// The query: one projection (the one `wq` reached), on x or on norm(q_down(x)).
bool find_query(const Subgraph& sg, const Walk& wq, Roles& r, Why& why) {
  const ir::Graph& g = *sg.graph;
  if (wq.linears.size() != 1) return why.reject("q comes from {} projections; expected one", wq.linears.size());
  r.q = ref_arg(g.nodes[r.att], 0);
  r.q_linear = *as_linear(g, *wq.linears.begin());
  if (r.q_linear.x == r.down.x) return true;
  const Walk wd = walk_back(sg, r.q_linear.x, [](int) { return false; });
  if (wd.linears.size() != 1 || !wd.rsqrt)
    return why.reject("the query projection reads neither the module input nor a normalized down-projection");
  r.q_down = *as_linear(g, *wd.linears.begin());
  if (r.q_down->x != r.down.x)
    return why.reject("the query down-projection reads another input than the KV down-projection");
  return true;
}

// The output projection: the attention output through views into a projection of the module
// (its output), or -1.
int find_out_proj(const Subgraph& sg, int att) {
  const ir::Graph& g = *sg.graph;
  std::vector<int> stack{att};
  std::set<int> seen;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int u : sg.users_of(v)) {
      if (!sg.contains(u) || !seen.insert(u).second) continue;
      if (auto l = as_linear(g, u); l && l->x == v) return l->out;
      if (is_view(g.nodes[u])) stack.push_back(u);
    }
  }
  return -1;
}

}  // namespace

std::optional<Roles> analyze(const Subgraph& sg, Why& why) {
  const ir::Graph& g = *sg.graph;
  auto atts = sg.own_of("fuselm.attention.default");
  if (atts.empty()) return why.not_applicable();
  Roles r;
  r.att = atts[0];
  const ir::Node& att = g.nodes[r.att];
  auto none = [](int) { return false; };
  const Walk wq = walk_back(sg, ref_arg(att, 0), none), wk = walk_back(sg, ref_arg(att, 1), none),
             wv = walk_back(sg, ref_arg(att, 2), none);
  std::vector<int> shared;
  for (int l : wk.linears)
    if (wv.linears.count(l) && !wq.linears.count(l)) shared.push_back(l);
  if (shared.empty()) return why.not_applicable();
  if (atts.size() != 1) return why.reject("{} attention ops in one module; expected one", atts.size());
  if (shared.size() != 1) return why.reject("{} projections feed both k and v; expected one up-projection", shared.size());
  r.up = *as_linear(g, shared[0]);
  if (r.up.kn) return why.reject("the K/V up-projection is a Conv1D (addmm); expected an [N,K] linear");
  if (r.up.bias >= 0) return why.reject("the K/V up-projection has a bias; weight absorption needs none");
  if (!find_value_and_key(sg, r, why) || !find_latent(sg, r, why) || !find_query(sg, wq, r, why)) return std::nullopt;
  r.out_proj = find_out_proj(sg, r.att);
  if (r.out_proj < 0) return why.reject("the attention output feeds no projection in the module");
  return r;
}

int64_t split_size(const ir::Graph& g, int split, int k) { return g.nodes[split].args[1].list[k].i; }

}  // namespace fuselm::fusers::mla
