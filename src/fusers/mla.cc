// MLA   multi-head latent attention  →  fuselm.mla_attention over a latent KV cache
//   anchor:   the module's own fuselm.attention op whose k and v both come from one projection
//             that q does not reach (the K/V up-projection); otherwise not a candidate, so
//             ordinary attention (k and v from two projections) and packed QKV (one for all
//             three) are not listed
//   roles:    from dataflow (mla_roles.cc); widths confirm them (in match: the cache key holds shapes):
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
#include "fusers/mla_roles.h"
#include "ir/op_defs.h"

namespace fuselm::fusers {
namespace {

using mla::Roles;

bool stackable(const ir::Graph& g, const Roles& r) {
  return r.q_down && !r.q_down->kn && !r.down.kn && (r.q_down->bias >= 0) == (r.down.bias >= 0) &&
         g.nodes[r.q_down->weight].out.dtype == g.nodes[r.down.weight].out.dtype;
}

// The widths of a latent attention module, checked against each other (the roles' shapes).
struct Widths {
  int64_t H = 0, Dr = 0, R = 0, Dn = 0, Dv = 0, ND = 0;
  double scale = 0;
};

std::optional<Widths> widths(const ir::Graph& g, const Roles& r, Why& why) {
  const ir::Node& att = g.nodes[r.att];
  Widths w;
  const auto scale = number_arg(att, "scaling");
  if (!scale) return why.reject("the softmax scale is not a number at capture");
  w.scale = *scale;
  if (number_arg(att, "sliding_window").value_or(-1) >= 0)
    return why.reject("sliding window with latent attention is not supported");
  if (number_arg(att, "softcap").value_or(0) != 0) return why.reject("softcap with latent attention is not supported");
  if (number_arg(att, "chunk_size").value_or(-1) > 0)
    return why.reject("chunked masks with latent attention are not supported");
  const auto& qm = g.nodes[r.q].out;
  const auto& km = g.nodes[r.k_rot].out;
  const auto H = static_dim(qm, 1), Dqk = static_dim(qm, 3), Dr = static_dim(km, -1);
  if (qm.shape.size() != 4 || !H || !Dqk || !Dr) return why.reject("q is not [1, heads, tokens, head_dim] with static sizes");
  if (km.shape.size() != 4 || static_dim(km, 1).value_or(0) != 1)
    return why.reject("the rope key is not one head [1, 1, tokens, rope]");
  w.H = *H, w.Dr = *Dr;
  w.R = linear_in_width(g, r.up), w.ND = linear_out_width(g, r.down);
  const int64_t NU = linear_out_width(g, r.up);
  w.Dn = mla::split_size(g, r.up_split, 0), w.Dv = mla::split_size(g, r.up_split, 1);
  const int64_t SR = mla::split_size(g, r.down_split, 0), SD = mla::split_size(g, r.down_split, 1);
  if (!w.R || NU != w.H * (w.Dn + w.Dv))
    return why.reject("up-projection width {} != {} heads x ({} + {})", NU, w.H, w.Dn, w.Dv);
  if (SR != w.R || SD != w.Dr || w.ND != w.R + w.Dr)
    return why.reject("KV down-projection width {} != latent {} + rope {} (split {}+{})", w.ND, w.R, w.Dr, SR, SD);
  if (*Dqk != w.Dn + w.Dr) return why.reject("q head size {} != nope {} + rope {}", *Dqk, w.Dn, w.Dr);
  const auto latent_w = static_dim(g.nodes[r.latent].out, -1);
  if (!latent_w || *latent_w != w.R) return why.reject("the latent is not {} wide", w.R);
  return w;
}

// With q-LoRA, [q_down; kv_down] as one GEMM on x whose split pieces replace both (TP: column
// parallel; both are replicated in DeepSeek's own TP, annotated here as stacked columns).
// Returns the q-LoRA width.
std::optional<int64_t> stack_down_projections(const ir::Graph& g, const Roles& r, Fusion& f, Why& why) {
  const int64_t nq = linear_out_width(g, *r.q_down), k = linear_in_width(g, r.down);
  if (!nq || !k || linear_in_width(g, *r.q_down) != k)
    return why.reject("q and KV down-projections differ in input width");
  const LinearLike parts[] = {*r.q_down, r.down};
  const auto gemm = stacked_linear(g, f, parts, "__fused_q_kv_down", why);
  if (!gemm) return std::nullopt;
  NewNode sp;
  sp.op = ops::split_with_sizes;
  ir::Arg sizes;
  sizes.kind = ir::Arg::Kind::list;
  sizes.list = {integer(nq), integer(linear_out_width(g, r.down))};
  sp.args = {ref(*gemm), sizes, integer(-1)};
  sp.out_kind = ir::Node::Out::tuple;
  sp.outs = {g.nodes[r.q_down->out].out, g.nodes[r.down.out].out};
  f.nodes.push_back(sp);
  const int sref = new_ref(static_cast<int>(f.nodes.size()) - 1);
  const int outs[2] = {r.q_down->out, r.down.out};
  for (int i = 0; i < 2; ++i) {
    NewNode gi;
    gi.op = ops::getitem;
    gi.args = {ref(sref), integer(i)};
    gi.out = g.nodes[outs[i]].out;
    f.nodes.push_back(gi);
    f.replaces.push_back({outs[i], new_ref(static_cast<int>(f.nodes.size()) - 1)});
  }
  return nq;
}

class MlaFuser final : public Fuser {
 public:
  std::string_view name() const override { return "mla"; }
  std::optional<Fallback> fallback() const override {
    return Fallback{"latent attention", "running full attention"};
  }

  // Roles and widths here (the cache key holds every shape); validate adds the layer index.
  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto r = mla::analyze(sg, why);
    if (!r) return std::nullopt;
    const auto w = widths(g, *r, why);
    if (!w) return std::nullopt;
    Fusion f;
    int64_t nq = 0;
    if (stackable(g, *r)) {
      const auto q = stack_down_projections(g, *r, f, why);
      if (!q) return std::nullopt;
      nq = *q;
    }
    NewNode m = op_node("fuselm.mla_attention.default",
                        {{"q", ref(r->q)}, {"latent", ref(r->latent)}, {"k_rot", ref(r->k_rot)},
                         {"w_up", ref(r->up.weight)}, {"scaling", real(w->scale)}, {"layer_idx", integer(-1)},
                         {"nope_dim", integer(w->Dn)}, {"v_dim", integer(w->Dv)}});
    m.out = g.nodes[r->att].out;
    m.place_before = r->att;
    f.nodes.push_back(m);
    f.replaces.push_back({r->att, new_ref(static_cast<int>(f.nodes.size()) - 1)});
    const int64_t expanded = w->H * (w->Dn + w->Dr + w->Dv);
    f.detail = fmt::format("heads={} latent={} rope={} nope={} v={} scale={:g} {} kv/token={} floats "
                           "(expanded {}, {:.1f}x)",
                           w->H, w->R, w->Dr, w->Dn, w->Dv, w->scale,
                           r->q_down ? (f.weights.empty() ? fmt::format("q_lora={}", linear_out_width(g, *r->q_down))
                                                          : fmt::format("q_lora={} stacked q_down|kv_down", nq))
                                     : std::string("q=direct"),
                           w->R + w->Dr, expanded, static_cast<double>(expanded) / static_cast<double>(w->R + w->Dr));
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Node& att = sg.node(f.replaces.back().first);
    const auto& la = att.args[ir::op_def(att.op).arg("layer_idx")];
    // The op's own KV layer (capture numbers the calls in graph order); the module's layer_idx
    // only for an op without one (an older or hand-written IR), as the attention fuser reads it.
    int64_t layer = la.kind == ir::Arg::Kind::integer ? la.i : -1;
    const auto& attrs = sg.mod().attributes;
    if (layer < 0 && attrs.is_object() && attrs.contains("layer_idx") && attrs["layer_idx"].is_number_integer())
      layer = attrs["layer_idx"].get<int64_t>();
    if (layer < 0) return why.reject("no layer index");  // the attention fuser reports it as an error
    arg_of(f.nodes.back(), "layer_idx") = integer(layer);
    f.detail = fmt::format("layer={} {}", layer, f.detail);
    return true;
  }
};

}  // namespace

const Fuser& mla_fuser() {
  static const MlaFuser f;
  return f;
}

// Registry order 20: before packed_qkv/qkv: an MLA module's attention also reads projections.
[[maybe_unused]] const bool kRegistered = register_fuser(mla_fuser(), 20);

}  // namespace fuselm::fusers
