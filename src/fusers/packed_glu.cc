// packed GLU   act(y[..., :n]) ⊙ y[..., n:] of one projection y  →  fuselm.act_and_mul(y, act)
//   anchor:   the module's own multiply of act(piece 0) and piece 1 (either operand order), the
//             pieces the two halves of one linear-like's output cut along its last dim: getitem
//             of chunk(y, 2, -1), split or split_with_sizes, or the slices [0, e) and [e, end)
//   act:      silu | gelu | gelu_tanh (as for glu); the gate in the second half is rejected
//             (act_and_mul takes [gate | up])
//   produces: the projection is already one GEMM (Phi-3's gate_up_proj), so act_and_mul reads its
//             output as is; no weight changes. Widths per instance: projection 2n, product n.
//   TP:       the projection column parallel by sections: each rank takes [gate_r; up_r]; the down
//             projection row parallel.
#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

// Piece k of a 2-way cut of a linear-like's output along its last dim: getitem k of
// chunk(y, 2, -1), split(y, n, -1), split_with_sizes(y, [n, n], -1), or slice(y, -1, 0|n, ..).
struct Piece {
  int linear = -1, index = -1;
  bool slice = false;
  double start = 0, end = 0;  // slices only: the literal bounds
};
std::optional<Piece> half_of(const ir::Graph& g, int v) {
  if (v < 0) return std::nullopt;
  const ir::Node& n = g.nodes[v];
  auto last = [&](const ir::Node& x, std::optional<double> d) {
    const auto rank = static_cast<double>(x.out.shape.size());
    return d && (*d == -1 || *d == rank - 1);
  };
  if (n.op == ops::getitem) {
    const int s = ref_arg(n, 0);
    const auto k = number_arg(n, 1);
    if (s < 0 || !k) return std::nullopt;
    const ir::Node& sp = g.nodes[s];
    const int y = ref_arg(sp, 0);
    if (y < 0 || !as_linear(g, y) || as_linear(g, y)->out != y || sp.outs.size() != 2) return std::nullopt;
    const bool two = (sp.op == ops::chunk && number_arg(sp, 1) == 2.0 && last(g.nodes[y], number_arg(sp, 2))) ||
                     ((sp.op == ops::split || sp.op == ops::split_with_sizes) &&
                      last(g.nodes[y], number_arg(sp, 2)));
    if (!two) return std::nullopt;
    return Piece{y, static_cast<int>(*k)};
  }
  if (n.op == ops::slice) {
    const int y = ref_arg(n, 0);
    if (y < 0 || !as_linear(g, y) || as_linear(g, y)->out != y || !last(g.nodes[y], number_arg(n, 1)) ||
        number_arg(n, 4).value_or(1) != 1)
      return std::nullopt;
    const auto start = number_arg(n, 2), end = number_arg(n, 3);
    if (!start || !end) return std::nullopt;
    return Piece{y, *start == 0 ? 0 : 1, true, *start, *end};
  }
  return std::nullopt;
}

class PackedGluFuser final : public Fuser {
 public:
  std::string_view name() const override { return "packed_glu"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    for (int m : sg.own_of(ops::mul)) {
      const ir::Node& mul = g.nodes[m];
      for (int order = 0; order < 2; ++order) {
        const int a = ref_arg(mul, order), b = ref_arg(mul, 1 - order);
        if (a < 0 || b < 0 || !sg.contains(a) || !is_elementwise_unary(g.nodes[a])) continue;
        const auto gate = half_of(g, ref_arg(g.nodes[a], 0)), up = half_of(g, b);
        if (!gate || !up || gate->linear != up->linear || gate->index == up->index) continue;
        const auto act = act_and_mul_activation(g.nodes[a], why);
        if (!act) return std::nullopt;
        if (gate->index != 0)
          return why.reject("packed GLU with the gate in the second half: act_and_mul takes [gate | up]");
        // Slices [0, e) and [e, end): with validate's widths (projection 2n, product n), e = n.
        if (gate->slice != up->slice) return why.reject("packed GLU halves cut by a slice and a split together");
        const bool open_end = up->end >= 4.0e18 || up->end == 2 * gate->end;
        if (gate->slice && (up->start != gate->end || !open_end))
          return why.reject("the gate and up slices [{}, {}) and [{}, {}) do not tile the projection", gate->start,
                            gate->end, up->start, up->end);
        const LinearLike lin = *as_linear(g, gate->linear);
        Fusion f;
        NewNode am;
        am.op = "fuselm.act_and_mul.default";
        am.args = {ref(lin.out), string(*act)};
        am.out = mul.out;
        f.nodes.push_back(am);
        f.replaces.push_back({m, new_ref(0)});
        // TP: each rank takes its share of both halves, [gate_r; up_r] (sections set in validate).
        f.shards.push_back(ShardNote{lin.weight, {}, Shard::column, lin.kn ? 1 : 0, {}});
        if (lin.bias >= 0) f.shards.push_back(ShardNote{lin.bias, {}, Shard::column, 0, {}});
        const auto down = down_projection(sg, m);
        if (down) f.shards.push_back(ShardNote{down->weight, {}, Shard::row, down->kn ? 0 : 1, {}});
        f.detail = fmt::format("act={} down={}{}", *act, down ? "yes" : "no", lin.kn ? " conv1d" : "");
        return f;
      }
    }
    return why.not_applicable();
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    const auto& mul = g.nodes[f.replaces[0].first].out;
    const auto n2 = static_dim(g.nodes[f.nodes[0].args[0].ref].out, -1), n = static_dim(mul, -1);
    if (!n2 || !n) return why.reject("the packed projection's width is not static");
    if (*n2 != 2 * *n) return why.reject("the gate and up halves are not {} wide each: the projection is {} wide", *n, *n2);
    f.nodes[0].out = mul;  // this instance's meta (a cached plan carries another's)
    auto& sec = f.shards[0].sections;
    sec = {HeadSection{"gate", *n, 1, false}, HeadSection{"up", *n, 1, false}};
    if (f.shards.size() > 1 && f.shards[1].shard == Shard::column) f.shards[1].sections = sec;
    f.detail = fmt::format("{} rows=2x{}", f.detail, *n);
    return true;
  }
};

}  // namespace

const Fuser& packed_glu_fuser() {
  static const PackedGluFuser f;
  return f;
}

// Registry order 60: an MLP block whose gate and up are one projection's halves.
[[maybe_unused]] const bool kRegistered = register_fuser(packed_glu_fuser(), 60);

}  // namespace fuselm::fusers
