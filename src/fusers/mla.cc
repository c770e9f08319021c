// MLA   multi-head latent attention  →  fuselm.mla_attention over a latent KV cache
//   anchor:   the module's own fuselm.attention op whose k and v both come from one projection
//             that q does not reach (the K/V up-projection); otherwise not a candidate, so
//             ordinary attention (k and v from two projections) and packed QKV (one for all
//             three) are not listed
//   roles:    from dataflow; widths confirm them (validate):
//     up      v = piece 1 of split(up(·), [Dn, Dv], -1) per head; the key's first piece along the
//             head dim is piece 0 of that split
//     key     [k_nope | k_rot] along the head dim: a cat, or new_empty filled by two copy_ into
//             slices (transformers ≥ 5.15's expand_kv); k_rot one head, broadcast over heads
//     latent  up's input; walking back it reaches piece 0 of split(down(x), [R, Dr], -1) through
//             an RMSNorm (an rsqrt, no projection) and nothing else
//     rope    k_rot walking back reaches piece 1 of that split and no projection (the rope itself
//             stays in the graph, in whatever layout the model computes it)
//     query   one projection reaches q: on x itself (no q-LoRA), or on norm(q_down(x)) (q-LoRA)
//     output  the attention output feeds a projection in the module
//   widths:   down = R + Dr, up = heads · (Dn + Dv) on R, q head = Dn + Dr (validate)
//   produces: fuselm.mla_attention(q, latent, k_rot, up.weight, scale, layer, Dn, Dv) in place of
//             the attention op (the expansion becomes dead and is removed); with q-LoRA one GEMM
//             over [q_down; kv_down] and a split whose pieces replace the two down-projections
//   rejects:  an up-projection with a bias or as Conv1D, sliding window, softcap, a query path or
//             latent/rope path of another shape (reason printed; the module runs full attention)
#include <algorithm>
#include <set>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

bool is_view(const ir::Node& n) {
  static const std::set<std::string> kViews = {"aten.view.default",      "aten.reshape.default",
                                               "aten.transpose.int",     "aten.unsqueeze.default",
                                               "aten.squeeze.dim",       "aten.permute.default",
                                               "aten.alias.default",     "aten.expand.default",
                                               "aten.contiguous.default", "aten.clone.default"};
  return (kViews.count(n.op) && ref_arg(n, 0) >= 0) || is_float_cast(n);
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
  if (i < 0 || g.nodes[i].op != "getitem") return std::nullopt;
  const int s = ref_arg(g.nodes[i], 0);
  if (s < 0 || g.nodes[s].op != "aten.split_with_sizes.default") return std::nullopt;
  const auto& sn = g.nodes[s];
  const int src = ref_arg(sn, 0);
  if (src < 0 || sn.args.size() < 3 || sn.args[1].list.size() != 2 || sn.args[2].kind != ir::Arg::Kind::integer ||
      !last_dim(g, src, sn.args[2].i) || g.nodes[i].args[1].kind != ir::Arg::Kind::integer)
    return std::nullopt;
  return Piece{s, g.nodes[i].args[1].i};
}

int64_t split_size(const ir::Graph& g, int split, int k) { return g.nodes[split].args[1].list[k].i; }

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
    if (g.nodes[v].op == "aten.rsqrt.default") w.rsqrt = true;
    for (const auto& a : g.nodes[v].args) {
      if (a.kind == ir::Arg::Kind::ref) stack.push_back(a.ref);
      for (const auto& x : a.list)
        if (x.kind == ir::Arg::Kind::ref) stack.push_back(x.ref);
    }
  }
  return w;
}

struct Roles {
  int att = -1, q = -1, latent = -1, k_rot = -1, out_proj = -1;
  LinearLike up, down, q_proj;
  std::optional<LinearLike> q_down;  // q-LoRA
  int up_split = -1, down_split = -1;
};

// The MLA roles of the module's attention op, or a reason (not_applicable when no projection
// feeds both k and v without reaching q).
std::optional<Roles> analyze(const Subgraph& sg, Why& why) {
  const ir::Graph& g = *sg.graph;
  auto ops = sg.own_of("fuselm.attention.default");
  if (ops.empty()) return why.not_applicable();
  Roles r;
  r.att = ops[0];
  const ir::Node& att = g.nodes[r.att];
  auto none = [](int) { return false; };
  const Walk wq = walk_back(sg, ref_arg(att, 0), none), wk = walk_back(sg, ref_arg(att, 1), none),
             wv = walk_back(sg, ref_arg(att, 2), none);
  std::vector<int> shared;
  for (int l : wk.linears)
    if (wv.linears.count(l) && !wq.linears.count(l)) shared.push_back(l);
  if (shared.empty()) return why.not_applicable();
  if (ops.size() != 1) return why.reject("{} attention ops in one module; expected one", ops.size());
  if (shared.size() != 1) return why.reject("{} projections feed both k and v; expected one up-projection", shared.size());
  r.up = *as_linear(g, shared[0]);
  if (r.up.kn) return why.reject("the K/V up-projection is a Conv1D (addmm); expected an [N,K] linear");
  if (r.up.bias >= 0) return why.reject("the K/V up-projection has a bias; weight absorption needs none");

  // v: piece 1 of the per-head split of up's output.
  const auto vp = as_piece(g, strip_views(g, ref_arg(att, 2)));
  if (!vp || vp->index != 1 || strip_views(g, ref_arg(g.nodes[vp->split], 0)) != r.up.out)
    return why.reject("v is not the second piece of a split of the up-projection along the head dim");
  r.up_split = vp->split;

  // The key's pieces along the head dim, in order.
  const int key = strip_views(g, ref_arg(att, 1));
  std::vector<std::pair<int64_t, int>> pieces;  // (start or order, source)
  const ir::Node& kn = g.nodes[key];
  if (kn.op == "aten.cat.default" && kn.args.size() >= 2 && kn.args[1].kind == ir::Arg::Kind::integer &&
      last_dim(g, key, kn.args[1].i)) {
    for (const auto& x : kn.args[0].list)
      if (x.kind == ir::Arg::Kind::ref) pieces.push_back({static_cast<int64_t>(pieces.size()), x.ref});
    if (pieces.size() != kn.args[0].list.size()) pieces.clear();
  } else if (kn.op == "aten.new_empty.default") {
    for (int u : sg.users_of(key)) {
      const ir::Node& un = g.nodes[u];
      if (un.op == "aten.copy_.default") return why.reject("the key is written whole by a copy, not assembled");
      if (un.op != "aten.slice.Tensor" || ref_arg(un, 0) != key) continue;
      if (un.args.size() < 5 || un.args[1].kind != ir::Arg::Kind::integer || !last_dim(g, key, un.args[1].i) ||
          un.args[2].kind != ir::Arg::Kind::integer || un.args[4].kind != ir::Arg::Kind::integer || un.args[4].i != 1)
        return why.reject("the key is filled through a slice that is not a unit-step range of the head dim");
      const auto& su = sg.users_of(u);
      if (su.size() != 1 || g.nodes[su[0]].op != "aten.copy_.default" || ref_arg(g.nodes[su[0]], 0) != u)
        return why.reject("a slice of the key is not the target of exactly one copy");
      pieces.push_back({un.args[2].i, ref_arg(g.nodes[su[0]], 1)});
    }
  } else {
    return why.reject("the key is neither a concatenation nor a new tensor filled by copies along the head dim");
  }
  std::sort(pieces.begin(), pieces.end());
  if (pieces.size() != 2) return why.reject("the key has {} pieces along the head dim; expected k_nope and k_rot", pieces.size());
  const auto kp = as_piece(g, strip_views(g, pieces[0].second));
  if (!kp || kp->split != r.up_split || kp->index != 0)
    return why.reject("the key's first piece is not the first piece of the up-projection's split");
  r.k_rot = strip_views(g, pieces[1].second);

  // latent: up's input, back through an RMSNorm to piece 0 of split(down(x)).
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

  // rope key: back to piece 1 of the same split, through no projection.
  const Walk wr = walk_back(sg, r.k_rot, is_piece);
  if (wr.stops.size() != 1 || !wr.linears.empty())
    return why.reject("the rope key does not come from one split piece alone");
  const auto rp = as_piece(g, *wr.stops.begin());
  if (rp->split != r.down_split || rp->index != 1)
    return why.reject("the rope key is not the second piece of the KV down-projection's split");

  // query: one projection, on x or on norm(q_down(x)).
  if (wq.linears.size() != 1) return why.reject("q comes from {} projections; expected one", wq.linears.size());
  r.q = ref_arg(att, 0);
  r.q_proj = *as_linear(g, *wq.linears.begin());
  if (r.q_proj.x != r.down.x) {
    const Walk wd = walk_back(sg, r.q_proj.x, none);
    if (wd.linears.size() != 1 || !wd.rsqrt)
      return why.reject("the query projection reads neither the module input nor a normalized down-projection");
    r.q_down = *as_linear(g, *wd.linears.begin());
    if (r.q_down->x != r.down.x)
      return why.reject("the query down-projection reads another input than the KV down-projection");
  }

  // output projection: the attention output through views into a projection of the module.
  std::vector<int> stack{r.att};
  std::set<int> seen;
  while (!stack.empty() && r.out_proj < 0) {
    const int v = stack.back();
    stack.pop_back();
    for (int u : sg.users_of(v)) {
      if (!sg.contains(u) || !seen.insert(u).second) continue;
      if (auto l = as_linear(g, u); l && l->x == v) {
        r.out_proj = l->out;
        break;
      }
      if (is_view(g.nodes[u])) stack.push_back(u);
    }
  }
  if (r.out_proj < 0) return why.reject("the attention output feeds no projection in the module");
  return r;
}

bool stackable(const ir::Graph& g, const Roles& r) {
  return r.q_down && !r.q_down->kn && !r.down.kn && (r.q_down->bias >= 0) == (r.down.bias >= 0) &&
         g.nodes[r.q_down->weight].out.dtype == g.nodes[r.down.weight].out.dtype;
}

NewNode param_node(const ir::Graph& g, int source, int weight) {
  NewNode n;
  n.op = "placeholder";
  n.weight = weight;
  n.out.dtype = g.nodes[source].out.dtype;
  return n;
}

class MlaFuser final : public Fuser {
 public:
  std::string_view name() const override { return "mla"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto r = analyze(sg, why);
    if (!r) return std::nullopt;
    Fusion f;
    if (stackable(g, *r)) {
      // [q_down; kv_down] as one GEMM on x (TP: column parallel; both are replicated in
      // DeepSeek's own TP, annotated here as stacked columns).
      WeightTransform w;
      w.name = "__fused_q_kv_down.weight";
      w.sources = {r->q_down->weight, r->down.weight};
      w.shard = Shard::column;
      f.weights.push_back(w);
      f.nodes.push_back(param_node(g, r->down.weight, 0));
      ir::Arg bias = none();
      if (r->down.bias >= 0) {
        WeightTransform b = w;
        b.name = "__fused_q_kv_down.bias";
        b.sources = {r->q_down->bias, r->down.bias};
        f.weights.push_back(b);
        f.nodes.push_back(param_node(g, r->down.bias, 1));
        bias = ref(new_ref(1));
      }
      NewNode l;
      l.op = "aten.linear.default";
      l.args = {ref(r->down.x), ref(new_ref(0)), bias};
      l.out = g.nodes[r->down.out].out;  // width set in validate
      f.nodes.push_back(l);
      NewNode sp;
      sp.op = "aten.split_with_sizes.default";
      ir::Arg sizes;
      sizes.kind = ir::Arg::Kind::list;
      sizes.list = {integer(0), integer(0)};  // set in validate
      sp.args = {ref(new_ref(static_cast<int>(f.nodes.size()) - 1)), sizes, integer(-1)};
      sp.out_kind = ir::Node::Out::tuple;
      sp.outs = {g.nodes[r->q_down->out].out, g.nodes[r->down.out].out};
      f.nodes.push_back(sp);
      const int sref = new_ref(static_cast<int>(f.nodes.size()) - 1);
      const int outs[2] = {r->q_down->out, r->down.out};
      for (int k = 0; k < 2; ++k) {
        NewNode gi;
        gi.op = "getitem";
        gi.args = {ref(sref), integer(k)};
        gi.out = g.nodes[outs[k]].out;
        f.nodes.push_back(gi);
        f.replaces.push_back({outs[k], new_ref(static_cast<int>(f.nodes.size()) - 1)});
      }
    }
    NewNode m;
    m.op = "fuselm.mla_attention.default";
    m.args = {ref(r->q), ref(r->latent), ref(r->k_rot), ref(r->up.weight), real(0.0), integer(-1), integer(0), integer(0)};
    m.out = g.nodes[r->att].out;
    m.place_before = r->att;
    f.nodes.push_back(m);
    f.replaces.push_back({r->att, new_ref(static_cast<int>(f.nodes.size()) - 1)});
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto r = analyze(sg, why);
    if (!r) return false;
    const ir::Node& att = g.nodes[r->att];
    const auto scale = number_arg(att, 4);
    if (!scale) return why.reject("the softmax scale is not a number at capture");
    if (number_arg(att, 5).value_or(-1) >= 0) return why.reject("sliding window with latent attention is not supported");
    if (number_arg(att, 6).value_or(0) != 0) return why.reject("softcap with latent attention is not supported");
    const auto& attrs = sg.mod().attributes;
    int64_t layer = att.args.size() > 7 && att.args[7].kind == ir::Arg::Kind::integer ? att.args[7].i : -1;
    if (attrs.is_object() && attrs.contains("layer_idx") && attrs["layer_idx"].is_number_integer())
      layer = attrs["layer_idx"].get<int64_t>();
    if (layer < 0) return why.reject("no layer index");  // the attention fuser reports it as an error

    const auto& qm = g.nodes[r->q].out;
    const auto& km = g.nodes[r->k_rot].out;
    const auto H = static_dim(qm, 1), Dqk = static_dim(qm, 3), Dr = static_dim(km, -1);
    if (qm.shape.size() != 4 || !H || !Dqk || !Dr) return why.reject("q is not [1, heads, tokens, head_dim] with static sizes");
    if (km.shape.size() != 4 || static_dim(km, 1).value_or(0) != 1)
      return why.reject("the rope key is not one head [1, 1, tokens, rope]");
    const int64_t R = linear_in_width(g, r->up), NU = linear_out_width(g, r->up), ND = linear_out_width(g, r->down);
    const int64_t Dn = split_size(g, r->up_split, 0), Dv = split_size(g, r->up_split, 1);
    const int64_t SR = split_size(g, r->down_split, 0), SD = split_size(g, r->down_split, 1);
    if (!R || NU != *H * (Dn + Dv))
      return why.reject("up-projection width {} != {} heads x ({} + {})", NU, *H, Dn, Dv);
    if (SR != R || SD != *Dr || ND != R + *Dr)
      return why.reject("KV down-projection width {} != latent {} + rope {} (split {}+{})", ND, R, *Dr, SR, SD);
    if (*Dqk != Dn + *Dr) return why.reject("q head size {} != nope {} + rope {}", *Dqk, Dn, *Dr);
    const auto latent_w = static_dim(g.nodes[r->latent].out, -1);
    if (!latent_w || *latent_w != R) return why.reject("the latent is not {} wide", R);

    int64_t nq = 0;
    if (!f.weights.empty()) {
      nq = linear_out_width(g, *r->q_down);
      const int64_t k = linear_in_width(g, r->down);
      if (!nq || !k || linear_in_width(g, *r->q_down) != k) return why.reject("q and KV down-projections differ in input width");
      f.weights[0].shape = {nq + ND, k};
      if (f.weights.size() > 1) f.weights[1].shape = {nq + ND};
    }
    for (auto& nn : f.nodes) {
      if (nn.op == "placeholder") {
        nn.out.shape.clear();
        for (auto d : f.weights[nn.weight].shape) nn.out.shape.push_back(ir::Dim{d, {}});
      } else if (nn.op == "aten.linear.default") {
        nn.out.shape.back() = ir::Dim{nq + ND, {}};
      } else if (nn.op == "aten.split_with_sizes.default") {
        nn.args[1].list[0].i = nq;
        nn.args[1].list[1].i = ND;
      } else if (nn.op == "fuselm.mla_attention.default") {
        nn.args[4] = real(*scale);
        nn.args[5] = integer(layer);
        nn.args[6] = integer(Dn);
        nn.args[7] = integer(Dv);
      }
    }
    const int64_t expanded = *H * (*Dqk + Dv);
    f.detail = fmt::format("layer={} heads={} latent={} rope={} nope={} v={} scale={:g} {} kv/token={} floats "
                           "(expanded {}, {:.1f}x)",
                           layer, *H, R, *Dr, Dn, Dv, *scale,
                           r->q_down ? (f.weights.empty() ? fmt::format("q_lora={}", linear_out_width(g, *r->q_down))
                                                          : fmt::format("q_lora={} stacked q_down|kv_down", nq))
                                     : std::string("q=direct"),
                           R + *Dr, expanded, static_cast<double>(expanded) / static_cast<double>(R + *Dr));
    return true;
  }
};

}  // namespace

const Fuser& mla_fuser() {
  static const MlaFuser f;
  return f;
}

}  // namespace fuselm::fusers
