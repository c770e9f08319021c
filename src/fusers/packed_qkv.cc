// packed QKV   one projection split (q, kv, kv) feeding one attention op  →  one split with
//              per-instance sizes and per-rank section sizes for tensor parallelism
//   anchor:   the module's own fuselm.attention op; a candidate when one linear-like reaches
//             several of its q, k, v operands (else the module has no packed projection)
//   split:    the projection's output, through views that keep its last dim (unsqueeze, view to
//             the same width, casts), cut along the last dim into three pieces that tile the whole
//             output: three slices (Phi-3), split_with_sizes (GPTBigCode MQA), split or chunk
//             (GPT-2). A view to [..., heads, 3·d] before the cut is interleaved per head
//             (GPT-NeoX, GPTBigCode MHA): the pieces are not (q, k, v) column blocks, so TP cannot
//             give each rank its block of each; rejected with that reason.
//   roles:    from dataflow: walking back from q, k and v each reaches exactly one piece, three
//             different ones; each piece's width is heads × head size of its operand (validate).
//   produces: the projection stays one GEMM (it already is). The pieces become one
//             split_with_sizes(last dim) with this instance's sizes; the fusion carries the
//             sections (role, heads, head size) so TP can rewrite the sizes per rank: q
//             heads/tp·d, k and v the same or one replicated head (MQA).
//   TP:       the projection column parallel by sections ([q_r; k_r; v_r]); the output
//             projection, found forward from the op through views, dropout and other ops, row
//             parallel.
#include <algorithm>
#include <set>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

constexpr const char* kRole[] = {"q", "k", "v"};

// Ops between the projection and the cut that keep every row's columns as they are.
bool keeps_columns(const ir::Node& n, const ir::Node& input) {
  const auto w_in = static_dim(input.out, -1), w_out = static_dim(n.out, -1);
  if (n.out_kind != ir::Node::Out::tensor || !w_in || !w_out || *w_in != *w_out) return false;
  if (is_view_of(n, {ir::ViewKind::reshape, ir::ViewKind::alias, ir::ViewKind::copy}) || is_float_cast(n)) return true;
  if (is_view_of(n, {ir::ViewKind::unsqueeze})) {
    const int64_t rank = static_cast<int64_t>(input.out.shape.size());
    const int64_t d = number_arg(n, 1) ? static_cast<int64_t>(*number_arg(n, 1)) : rank;
    return d != rank && d != -1;
  }
  return false;
}

std::string dim_text(const ir::Dim& d) { return d.symbolic() ? d.expr : std::to_string(d.value); }

// A cut of value x along its last dim.
bool last_dim(const ir::Node& x, std::optional<double> dim) {
  const int64_t rank = static_cast<int64_t>(x.out.shape.size());
  return dim && (static_cast<int64_t>(*dim) == rank - 1 || static_cast<int64_t>(*dim) == -1);
}

// Follows the projection's output through column-keeping views to the value that is cut.
std::optional<int> cut_input(const Subgraph& sg, const LinearLike& lin, Why& why) {
  const ir::Graph& g = *sg.graph;
  int x = lin.out;
  while (true) {
    const auto& us = sg.users_of(x);
    for (int u : us)
      if (!sg.contains(u)) return why.reject("the packed projection's output is read outside the module");
    if (us.size() != 1) break;
    const ir::Node& u = g.nodes[us[0]];
    if (keeps_columns(u, g.nodes[x])) {
      x = us[0];
      continue;
    }
    if (is_reshape(u) && u.out.shape.size() > g.nodes[x].out.shape.size())
      return why.reject("the projection is viewed per head ([..., {}, {}]) before it is split: interleaved per "
                        "head, not packed QKV", dim_text(u.out.shape.end()[-2]), dim_text(u.out.shape.back()));
    break;
  }
  if (!static_dim(g.nodes[x].out, -1)) return why.reject("the packed projection's width is not static");
  return x;
}

bool is_split(const ir::Node& n) {
  return n.op == ops::split_with_sizes || n.op == ops::split || n.op == ops::chunk;
}

// The pieces x is cut into along its last dim, (first column, value) in column order, tiling it.
std::optional<std::vector<std::pair<int64_t, int>>> cut_pieces(const Subgraph& sg, int x, Why& why) {
  const ir::Graph& g = *sg.graph;
  const ir::Node& xn = g.nodes[x];
  const auto width = static_dim(xn.out, -1);
  std::vector<std::pair<int64_t, int>> pieces;
  const auto& us = sg.users_of(x);
  const bool all_slices =
      std::all_of(us.begin(), us.end(), [&](int u) { return is_op(g.nodes[u], ops::slice); });
  if (all_slices) {
    for (int u : us) {
      const ir::Node& s = g.nodes[u];
      const auto start = number_arg(s, 2), end = number_arg(s, 3), step = number_arg(s, 4);
      if (!last_dim(xn, number_arg(s, 1)) || !start || !end || step.value_or(1) != 1 || *start < 0)
        return why.reject("a slice of the packed projection is not a step-1 range of its last dim");
      pieces.push_back({static_cast<int64_t>(*start), u});
    }
  } else if (us.size() == 1 && is_split(g.nodes[us[0]])) {
    const ir::Node& s = g.nodes[us[0]];
    if (!last_dim(xn, number_arg(s, 2)))
      return why.reject("the packed projection is split along another dim than its last");
    std::vector<int> item(s.outs.size(), -1);
    for (int u : sg.users_of(us[0])) {
      const auto k = number_arg(g.nodes[u], 1);
      const bool once = k && *k >= 0 && *k < static_cast<double>(item.size()) && item[static_cast<size_t>(*k)] < 0;
      if (!is_op(g.nodes[u], ops::getitem) || !once)
        return why.reject("the split's pieces are not each read once through getitem");
      item[static_cast<size_t>(*k)] = u;
    }
    int64_t col = 0;
    for (size_t k = 0; k < item.size(); ++k) {
      if (item[k] < 0) return why.reject("piece {} of the split is unused: the split does not feed q, k, v whole", k);
      pieces.push_back({col, item[k]});
      col += static_dim(s.outs[k], -1).value_or(0);
    }
  } else {
    return why.reject("the packed projection's output reaches {} before being cut into q, k, v",
                      us.empty() ? std::string("nothing") : g.nodes[us[0]].op);
  }
  std::sort(pieces.begin(), pieces.end());
  if (pieces.size() != 3)
    return why.reject("the packed projection is cut into {} pieces; expected 3 (q, k, v)", pieces.size());
  int64_t col = 0;
  for (const auto& [start, v] : pieces) {
    if (start != col) return why.reject("the pieces do not tile the projection (a gap or overlap at column {})", col);
    const auto w = static_dim(g.nodes[v].out, -1);
    if (!w) return why.reject("a piece of the packed projection has a symbolic width");
    col += *w;
  }
  if (col != *width) return why.reject("the pieces cover {} of the projection's {} columns", col, *width);
  return pieces;
}

class PackedQkvFuser final : public Fuser {
 public:
  std::string_view name() const override { return "packed_qkv"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto ops = sg.own_of("fuselm.attention.default");
    if (ops.empty()) return why.not_applicable();
    const ir::Node& att = g.nodes[ops.back()];

    // The projections each operand comes from (walking back through the module's nodes).
    std::set<int> from[3];
    for (int r = 0; r < 3; ++r) from[r] = upstream_linears(sg, ref_arg(att, r));
    int packed = -1;
    for (int r = 0; r < 3 && packed < 0; ++r)
      for (int l : from[r])
        for (int s = r + 1; s < 3; ++s)
          if (from[s].count(l)) packed = l;
    if (packed < 0) return why.not_applicable();
    if (ops.size() != 1) return why.reject("{} attention ops in one module; expected one", ops.size());
    const LinearLike lin = *as_linear(g, packed);

    const auto cut = cut_input(sg, lin, why);
    if (!cut) return std::nullopt;
    const int x = *cut;
    const auto found = cut_pieces(sg, x, why);
    if (!found) return std::nullopt;
    const auto& pieces = *found;
    // Roles: each operand reaches exactly one piece, and nothing else of the projection.
    std::set<int> piece_values;
    for (const auto& p : pieces) piece_values.insert(p.second);
    int role_piece[3];
    for (int r = 0; r < 3; ++r) {
      std::set<int> reached;
      const auto linears = upstream_linears(sg, ref_arg(att, r), piece_values, &reached);
      if (linears.count(lin.out))
        return why.reject("the {} operand reads the packed projection around its pieces", kRole[r]);
      if (!linears.empty()) return why.reject("the {} operand also comes from another projection", kRole[r]);
      if (reached.size() != 1)
        return why.reject("the {} operand comes from {} pieces; expected one", kRole[r], reached.size());
      role_piece[r] = *reached.begin();
    }
    if (role_piece[0] == role_piece[1] || role_piece[1] == role_piece[2] || role_piece[0] == role_piece[2])
      return why.reject("one piece feeds several of q, k, v");

    Fusion f;
    NewNode sp;
    sp.op = ops::split_with_sizes;
    ir::Arg sizes;
    sizes.kind = ir::Arg::Kind::list;
    for (size_t k = 0; k < pieces.size(); ++k) sizes.list.push_back(integer(0));  // validate: this instance's
    sp.args = {ref(x), sizes, integer(-1)};
    sp.out_kind = ir::Node::Out::tuple;
    sp.outs.resize(pieces.size());
    f.nodes.push_back(sp);
    for (size_t k = 0; k < pieces.size(); ++k) {
      NewNode gi;
      gi.op = ops::getitem;
      gi.args = {ref(new_ref(0)), integer(static_cast<int64_t>(k))};
      f.nodes.push_back(gi);
      f.replaces.push_back({pieces[k].second, new_ref(static_cast<int>(k) + 1)});
    }
    // Sections in column order; the role of each from the operand it reaches.
    ShardNote w{lin.weight, {}, Shard::column, lin.kn ? 1 : 0, {}};
    for (const auto& p : pieces) {
      const int r = static_cast<int>(std::find(role_piece, role_piece + 3, p.second) - role_piece);
      w.sections.push_back(HeadSection{kRole[r], 0, 0, r != 0});
    }
    f.shards.push_back(w);
    if (lin.bias >= 0) {
      ShardNote b = w;
      b.param = lin.bias;
      b.axis = 0;
      f.shards.push_back(b);
    }
    bool out_proj = false;
    if (auto o = output_projection(sg, ops[0])) {
      f.shards.push_back(ShardNote{o->weight, {}, Shard::row, o->kn ? 0 : 1, {}});
      out_proj = true;
    }
    f.detail = fmt::format("{}{}{}", lin.kn ? "conv1d " : "", lin.bias >= 0 ? "bias " : "",
                           out_proj ? "out=row" : "out=none");
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    const ir::Node& att = g.nodes[sg.own_of("fuselm.attention.default").at(0)];
    auto& sections = f.shards[0].sections;
    std::vector<int64_t> sizes;
    // The pieces tile this instance's output (a cached plan was checked on another's widths).
    const auto width = static_dim(g.nodes[f.nodes[0].args[0].ref].out, -1);
    int64_t col = 0;
    for (size_t k = 0; k < f.replaces.size(); ++k) {
      const ir::Node& piece = g.nodes[f.replaces[k].first];
      const auto w = static_dim(piece.out, -1);
      if (is_op(piece, ops::slice) && number_arg(piece, 2) != static_cast<double>(col))
        return why.reject("the pieces do not tile the projection (a gap or overlap at column {})", col);
      col += w.value_or(0);
    }
    if (!width || col != *width)
      return why.reject("the pieces cover {} of the projection's {} columns", col, width.value_or(0));
    for (size_t k = 0; k < f.replaces.size(); ++k) {
      const ir::Node& piece = g.nodes[f.replaces[k].first];
      auto& hs = sections[k];
      const int r = hs.role == "q" ? 0 : hs.role == "k" ? 1 : 2;
      const auto& op = g.nodes[ref_arg(att, r)].out;
      const auto heads = static_dim(op, 1), d = static_dim(op, 3), w = static_dim(piece.out, -1);
      if (op.shape.size() != 4 || !heads || !d || !w)
        return why.reject("the {} operand is not [1, heads, tokens, head_dim] with static sizes", hs.role);
      if (*heads * *d != *w)
        return why.reject("the {} piece is {} wide but its operand has {} heads x {}", hs.role, *w, *heads, *d);
      hs.heads = *heads;
      hs.head_dim = *d;
      sizes.push_back(*w);
      // This instance's metas (a cached plan carries the first instance's).
      f.nodes[0].outs[k] = piece.out;
      f.nodes[k + 1].out = piece.out;
    }
    for (size_t k = 0; k < sizes.size(); ++k) f.nodes[0].args[1].list[k].i = sizes[k];
    for (size_t s = 1; s < f.shards.size() && f.shards[s].shard == Shard::column; ++s) f.shards[s].sections = sections;
    std::string secs, ranks;
    for (const auto& hs : sections) {
      secs += fmt::format("{}{}:{}x{}", secs.empty() ? "" : "+", hs.role, hs.heads, hs.head_dim);
      ranks += fmt::format("{}{}", ranks.empty() ? "" : ",", hs.expr());
    }
    const auto tail = f.detail.substr(f.detail.rfind("out="));
    const auto head = f.detail.substr(0, f.detail.rfind("out="));
    f.detail = fmt::format("{}sections={} per-rank=[{}] {}", head, secs, ranks, tail);
    return true;
  }
};

}  // namespace

const Fuser& packed_qkv_fuser() {
  static const PackedQkvFuser f;
  return f;
}

// Registry order 30: before qkv: one projection cut into (q, k, v) pieces.
[[maybe_unused]] const bool kRegistered = register_fuser(packed_qkv_fuser(), 30);

}  // namespace fuselm::fusers
