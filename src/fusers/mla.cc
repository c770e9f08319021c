// MLA   multi-head latent attention  →  fuselm.mla_attention over a latent KV cache
//   anchor:   the module's own fuselm.attention op whose k and v both come from one projection
//             that q does not reach (the K/V up-projection); otherwise not a candidate, so
//             ordinary attention (k and v from two projections) and packed QKV (one for all
//             three) are not listed
//   roles:    from dataflow (mla_roles.cc); widths confirm them (validate):
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

namespace fuselm::fusers {
namespace {

using mla::Roles;

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
    auto r = mla::analyze(sg, why);
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
    auto r = mla::analyze(sg, why);
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
    const int64_t Dn = mla::split_size(g, r->up_split, 0), Dv = mla::split_size(g, r->up_split, 1);
    const int64_t SR = mla::split_size(g, r->down_split, 0), SD = mla::split_size(g, r->down_split, 1);
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
