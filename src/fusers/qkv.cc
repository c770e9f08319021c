// QKV   q = Q·x, k = K·x, v = V·x  feeding one attention op  →  one GEMM over [Q;K;V] + split
//   anchor:   the module's own fuselm.attention op
//   roles:    from dataflow, never from width or order: walking back from the op's q, k and v
//             operands through the module's nodes (views, rope, q/k norms, casts, scaling) each
//             must reach exactly one linear, and the three must differ. So projections computed
//             in v, k, q order, or an extra projection of another width beside them, are fine.
//   linears:  aten.linear with [N,K] parameter weights on the same x, one dtype, all or none
//             with a bias. One linear reaching all three operands is packed QKV (not this fuser).
//   produces: new parameter [Q;K;V] (dim 0), aten.linear over it, split_with_sizes([Nq,Nk,Nv])
//             whose pieces replace the three linears (sizes from the match: the cache key holds shapes).
//   TP:       column parallel by sections (q, k, v heads from the op's operands; per-rank sizes
//             in the detail), the output projection row parallel (annotated, unused yet).
#include <algorithm>
#include <set>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

class QkvFuser final : public Fuser {
 public:
  std::string_view name() const override { return "qkv"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto ops = sg.own_of("fuselm.attention.default");
    if (ops.empty()) return why.not_applicable();
    if (ops.size() != 1) return why.reject("{} attention ops in one module; expected one", ops.size());
    const ir::Node& att = g.nodes[ops[0]];
    static constexpr const char* kRole[] = {"q", "k", "v"};
    LinearLike lin[3];
    for (int r = 0; r < 3; ++r) {
      const auto found = upstream_linears(sg, ref_arg(att, r));
      if (found.size() != 1)
        return why.reject("the {} operand comes from {} projections in the module; expected one", kRole[r],
                          found.size());
      lin[r] = *as_linear(g, *found.begin());
    }
    if (lin[0].out == lin[1].out || lin[1].out == lin[2].out || lin[0].out == lin[2].out)
      return why.reject("one projection feeds several of q, k, v: a packed projection (packed_qkv), not three");
    for (int r = 0; r < 3; ++r) {
      if (lin[r].kn) return why.reject("the {} projection is a Conv1D (addmm); only [N,K] linears stack here", kRole[r]);
      if (lin[r].x != lin[0].x) return why.reject("q, k and v projections read different inputs");
      if ((lin[r].bias >= 0) != (lin[0].bias >= 0)) return why.reject("q, k, v disagree on having a bias");
      if (g.nodes[lin[r].weight].out.dtype != g.nodes[lin[0].weight].out.dtype)
        return why.reject("q, k, v weights have different dtypes");
    }
    int64_t n[3];
    for (int r = 0; r < 3; ++r) {
      const auto nr = static_dim(g.nodes[lin[r].weight].out, 0), kr = static_dim(g.nodes[lin[r].weight].out, 1);
      if (!nr || !kr) return why.reject("projection weight shape is not static");
      if (r > 0 && *kr != linear_in_width(g, lin[0])) return why.reject("q/k/v input widths differ: {} != {}", *kr, linear_in_width(g, lin[0]));
      n[r] = *nr;
    }

    Fusion f;
    if (auto o = output_projection(sg, ops[0])) f.shards.push_back(ShardNote{o->weight, {}, Shard::row, o->kn ? 0 : 1, {}});
    const auto gemm = stacked_linear(g, f, lin, "__fused_qkv", why);
    if (!gemm) return std::nullopt;
    NewNode sp;
    sp.op = ops::split_with_sizes;
    ir::Arg sizes;
    sizes.kind = ir::Arg::Kind::list;
    sizes.list = {integer(n[0]), integer(n[1]), integer(n[2])};
    sp.args = {ref(*gemm), sizes, integer(-1)};
    sp.out_kind = ir::Node::Out::tuple;
    for (int r = 0; r < 3; ++r) sp.outs.push_back(g.nodes[lin[r].out].out);
    f.nodes.push_back(sp);
    const int sref = new_ref(static_cast<int>(f.nodes.size()) - 1);
    for (int r = 0; r < 3; ++r) {
      NewNode gi;
      gi.op = ops::getitem;
      gi.args = {ref(sref), integer(r)};
      gi.out = g.nodes[lin[r].out].out;
      f.nodes.push_back(gi);
      f.replaces.push_back({lin[r].out, new_ref(static_cast<int>(f.nodes.size()) - 1)});
    }
    // Sections from the attention op's operands, when each projection is heads x head size of its
    // operand (else TP has no per-rank sizes for this fusion, and the detail says so).
    std::vector<HeadSection> secs;
    std::string ranks;
    for (int r = 0; r < 3; ++r) {
      const auto& op = g.nodes[ref_arg(att, r)].out;
      const auto heads = static_dim(op, 1), d = static_dim(op, 3);
      if (op.shape.size() != 4 || !heads || !d || *heads * *d != n[r]) break;
      secs.push_back(HeadSection{kRole[r], *heads, *d, r != 0});
      ranks += (r ? "," : "") + secs.back().expr();
    }
    if (secs.size() != 3) secs.clear();
    for (auto& w : f.weights) w.sections = secs;
    f.detail = fmt::format("rows={}+{}+{}{} per-rank=[{}] out={}", n[0], n[1], n[2], f.weights.size() > 1 ? " bias" : "",
                           secs.empty() ? "unknown" : ranks, f.shards.empty() ? "none" : "row");
    return f;
  }
};

}  // namespace

const Fuser& qkv_fuser() {
  static const QkvFuser f;
  return f;
}

// Registry order 40: an attention module: three projections feeding q, k, v.
[[maybe_unused]] const bool kRegistered = register_fuser(qkv_fuser(), 40);

}  // namespace fuselm::fusers
