// QKV   q = Q·x, k = K·x, v = V·x  feeding one attention op  →  one GEMM over [Q;K;V] + split
//   anchor:   the module's own fuselm.attention op
//   roles:    from dataflow, never from width or order: walking back from the op's q, k and v
//             operands through the module's nodes (views, rope, q/k norms, casts, scaling) each
//             must reach exactly one linear, and the three must differ. So projections computed
//             in v, k, q order, or an extra projection of another width beside them, are fine.
//   linears:  aten.linear with [N,K] parameter weights on the same x, one dtype, all or none
//             with a bias. One linear reaching all three operands is packed QKV (not this fuser).
//   produces: new parameter [Q;K;V] (dim 0), aten.linear over it, split_with_sizes([Nq,Nk,Nv])
//             whose pieces replace the three linears. Sizes are this instance's own (validate).
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
      std::set<int> found, seen;
      std::vector<int> stack{ref_arg(att, r)};
      while (!stack.empty()) {
        const int v = stack.back();
        stack.pop_back();
        if (v < 0 || !sg.contains(v) || !seen.insert(v).second) continue;
        if (auto l = as_linear(g, v); l && l->out == v) {
          found.insert(v);
          continue;
        }
        for (const auto& a : g.nodes[v].args) {
          if (a.kind == ir::Arg::Kind::ref) stack.push_back(a.ref);
          for (const auto& x : a.list)
            if (x.kind == ir::Arg::Kind::ref) stack.push_back(x.ref);
        }
      }
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

    Fusion f;
    if (auto o = output_projection(sg, ops[0])) f.shards.push_back(ShardNote{o->weight, {}, Shard::row, o->kn ? 0 : 1, {}});
    WeightTransform w;
    w.name = "__fused_qkv.weight";
    w.sources = {lin[0].weight, lin[1].weight, lin[2].weight};
    w.axis = 0;
    w.shard = Shard::column;
    f.weights.push_back(w);
    NewNode wn;
    wn.op = "placeholder";
    wn.weight = 0;
    wn.out.dtype = g.nodes[lin[0].weight].out.dtype;
    f.nodes.push_back(wn);
    ir::Arg bias = none();
    if (lin[0].bias >= 0) {
      WeightTransform b = w;
      b.name = "__fused_qkv.bias";
      b.sources = {lin[0].bias, lin[1].bias, lin[2].bias};
      f.weights.push_back(b);
      NewNode bn;
      bn.op = "placeholder";
      bn.weight = 1;
      bn.out.dtype = g.nodes[lin[0].bias].out.dtype;
      f.nodes.push_back(bn);
      bias = ref(new_ref(1));
    }
    NewNode l;
    l.op = "aten.linear.default";
    l.args = {ref(lin[0].x), ref(new_ref(0)), bias};
    l.out = g.nodes[lin[0].out].out;  // last dim set in validate
    f.nodes.push_back(l);
    const int lref = new_ref(static_cast<int>(f.nodes.size()) - 1);
    NewNode sp;
    sp.op = "aten.split_with_sizes.default";
    ir::Arg sizes;
    sizes.kind = ir::Arg::Kind::list;
    sizes.list = {integer(0), integer(0), integer(0)};  // set in validate
    sp.args = {ref(lref), sizes, integer(-1)};
    sp.out_kind = ir::Node::Out::tuple;
    for (int r = 0; r < 3; ++r) sp.outs.push_back(g.nodes[lin[r].out].out);
    f.nodes.push_back(sp);
    const int sref = new_ref(static_cast<int>(f.nodes.size()) - 1);
    for (int r = 0; r < 3; ++r) {
      NewNode gi;
      gi.op = "getitem";
      gi.args = {ref(sref), integer(r)};
      gi.out = g.nodes[lin[r].out].out;
      f.nodes.push_back(gi);
      f.replaces.push_back({lin[r].out, new_ref(static_cast<int>(f.nodes.size()) - 1)});
    }
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    int64_t n[3], k = 0;
    for (int r = 0; r < 3; ++r) {
      const auto& ws = g.nodes[f.weights[0].sources[r]].out;
      const auto nr = static_dim(ws, 0), kr = static_dim(ws, 1);
      if (!nr || !kr) return why.reject("projection weight shape is not static");
      if (r > 0 && *kr != k) return why.reject("q/k/v input widths differ: {} != {}", *kr, k);
      n[r] = *nr;
      k = *kr;
    }
    const int64_t total = n[0] + n[1] + n[2];
    f.weights[0].shape = {total, k};
    if (f.weights.size() > 1) f.weights[1].shape = {total};
    // This instance's metas: a cached plan carries those of the instance it was matched on.
    int piece = 0;
    for (auto& nn : f.nodes) {
      if (nn.op == "placeholder") {
        nn.out.shape.clear();
        for (auto d : f.weights[nn.weight].shape) nn.out.shape.push_back(ir::Dim{d, {}});
      } else if (nn.op == "aten.linear.default") {
        nn.out = g.nodes[f.replaces[0].first].out;
        nn.out.shape.back() = ir::Dim{total, {}};
      } else if (nn.op == "aten.split_with_sizes.default") {
        for (int r = 0; r < 3; ++r) {
          nn.args[1].list[r].i = n[r];
          nn.outs[r] = g.nodes[f.replaces[r].first].out;
        }
      } else if (nn.op == "getitem") {
        nn.out = g.nodes[f.replaces[piece++].first].out;
      }
    }
    // Sections from the attention op's operands, when each projection is heads x head size of its
    // operand (else TP has no per-rank sizes for this fusion, and the detail says so).
    static constexpr const char* kRole[] = {"q", "k", "v"};
    const ir::Node& att = g.nodes[sg.own_of("fuselm.attention.default").at(0)];
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
    return true;
  }
};

}  // namespace

const Fuser& qkv_fuser() {
  static const QkvFuser f;
  return f;
}

}  // namespace fuselm::fusers
