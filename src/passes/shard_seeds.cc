// The shard plan's seeds (shard_walk.h): the weights the walk starts from, from the fusion plan's
// notes and from the graph's structure (embedding tables and LM head, experts, MLA heads).
#include <algorithm>
#include <functional>
#include <stdexcept>

#include "passes/shard_walk.h"

namespace fuselm::passes::shard {

// The seeds of the fusion plan; notes without per-rank sizes are replicated with the reason.
std::vector<Seed> collect_seeds(const fusers::Plan& plan, int64_t n, ShardPlan& out) {
  std::vector<Seed> seeds;
  auto check = [&](const std::string& target, const std::vector<HeadSection>& secs) {
    for (const auto& h : secs)
      if (!h.per_rank(n))
        throw std::runtime_error(fmt::format("tensor parallel size {}: {} ({}) has {} {} x {} = {} columns, which do "
                                             "not divide among {} ranks",
                                             n, target, h.role, h.heads, h.head_dim == 1 ? "columns" : "heads",
                                             h.head_dim, h.size(), n));
  };
  for (const auto& w : plan.weights) {
    if (w.shard != Shard::column) continue;
    if (w.sections.empty() || w.sections.size() != w.sources.size()) {
      out.replicated.push_back(fmt::format("{}: its fusion gives no per-rank sections", w.target));
      continue;
    }
    check(w.target, w.sections);
    seeds.push_back(Seed{w.target, Shard::column, w.axis, w.sections, true, static_cast<int>(w.sources.size())});
  }
  for (const auto& s : plan.shards) {
    if (s.shard == Shard::column && s.sections.empty()) {
      out.replicated.push_back(fmt::format("{}: its fusion gives no per-rank sections", s.target));
      continue;
    }
    if (s.shard == Shard::column) check(s.target, s.sections);
    seeds.push_back(Seed{s.target, s.shard, s.axis, s.sections, false, 1});
  }
  return seeds;
}

namespace {

// A 2-d parameter with static sizes the node reads in argument `a`, or -1.
int param_at(const ir::Graph& g, const ir::Arg& a) {
  if (a.kind != ir::Arg::Kind::ref) return -1;
  const auto& p = g.nodes[a.ref];
  if (p.op != "placeholder" || p.placeholder_kind != "parameter" || p.out.shape.size() != 2) return -1;
  for (const auto& d : p.out.shape)
    if (d.symbolic()) return -1;
  return a.ref;
}

}  // namespace

// Vocab-parallel seeds: every table aten.embedding looks up, and the weight of the product behind
// the first output through pointwise ops of one tensor (the LM head, soft-capped or scaled). Both
// split by rows (the vocabulary), so a tied table is one seed; rows that do not divide among the
// ranks stay replicated, with why.
void vocab_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out) {
  std::set<int> tables;
  for (const auto& node : g.nodes)
    if (ir::op_traits(node.op).tp == ir::TpRule::embedding && !node.args.empty())
      if (int p = param_at(g, node.args[0]); p >= 0) tables.insert(p);
  for (int cur = g.outputs.empty() ? -1 : g.outputs.front(); cur >= 0;) {
    const auto& node = g.nodes[cur];
    if (ir::op_traits(node.op).tp == ir::TpRule::linear && node.args.size() > 1) {
      if (int p = param_at(g, node.args[1]); p >= 0) tables.insert(p);
      break;
    }
    if (ir::op_traits(node.op).tp != ir::TpRule::pointwise) break;
    int next = -1, refs = 0;
    for (const auto& a : node.args)
      if (a.kind == ir::Arg::Kind::ref) next = a.ref, ++refs;
    cur = refs == 1 ? next : -1;
  }
  for (int p : tables) {
    const auto& node = g.nodes[p];
    if (std::any_of(seeds.begin(), seeds.end(), [&](const Seed& s) { return s.target == node.target; })) continue;
    const int64_t v = node.out.shape[0].value;
    if (v % n != 0) {
      out.replicated.push_back(fmt::format("{}: its {} vocabulary rows do not divide among {} ranks", node.target, v, n));
      continue;
    }
    Seed sd{node.target, Shard::column, 0, {HeadSection{"vocab", v, 1, false}}, false, 1};
    sd.vocab = true;
    seeds.push_back(sd);
  }
}

namespace {

// A literal boolean argument of node n (false when absent or not a literal).
bool flag(const ir::Node& n, const ir::OpDef& def, const char* name) {
  const auto& a = n.args.at(def.arg(name));
  return a.kind == ir::Arg::Kind::boolean ? a.b : a.kind == ir::Arg::Kind::integer && a.i != 0;
}

// The static shape of the parameter node n reads in argument `name`, or empty.
std::vector<int64_t> param_shape(const ir::Graph& g, const ir::Node& n, const ir::OpDef& def, const char* name) {
  const auto& a = n.args.at(def.arg(name));
  if (a.kind != ir::Arg::Kind::ref) return {};
  const auto& p = g.nodes[a.ref];
  if (p.op != "placeholder" || p.placeholder_kind != "parameter") return {};
  std::vector<int64_t> s;
  for (const auto& d : p.out.shape) {
    if (d.symbolic()) return {};
    s.push_back(d.value);
  }
  return s;
}

}  // namespace

// MoE seeds: each experts op's weights split by every expert's intermediate size I (docs/moe.md
// has the layouts): gate_up's [gate; up] halves (or interleaved pairs, or up alone) column
// parallel, down row parallel, the gate_up bias as gate_up, the down bias on rank 0 only; the
// shared expert's gate/up by rows and its down by columns. The router stays replicated. An op
// whose I (or shared I) does not divide among the ranks keeps its experts whole, with why.
void moe_seeds(const ir::Graph& g, int64_t n, int64_t rank, std::vector<Seed>& seeds, ShardPlan& out) {
  for (const auto& node : g.nodes) {
    if (ir::op_traits(node.op).tp != ir::TpRule::experts) continue;
    const auto& def = ir::op_def(node.op);
    const bool tr = flag(node, def, "is_transposed"), cat = flag(node, def, "is_concatenated"),
               gate = flag(node, def, "has_gate");
    const auto gu = param_shape(g, node, def, "gate_up"), dn = param_shape(g, node, def, "down");
    const std::string where = g.nodes[node.args[def.arg("gate_up")].ref].target;
    if (gu.size() != 3 || dn.size() != 3) {
      out.replicated.push_back(fmt::format("{}: its experts' weights are not [E, ., .] parameters", where));
      continue;
    }
    const int gu_axis = tr ? 2 : 1, dn_axis = tr ? 1 : 2;
    const int64_t I = dn[dn_axis], l = I / n;
    std::vector<std::pair<const char*, Seed>> group;
    auto add = [&](const char* name, int axis, std::vector<std::pair<int64_t, int64_t>> pieces, bool zero,
                   const std::string& line) {
      const auto& a = node.args.at(def.arg(name));
      if (a.kind != ir::Arg::Kind::ref) return;
      const auto shape = param_shape(g, node, def, name);
      int64_t local = 0;
      for (const auto& pc : pieces) local += pc.second;
      if (zero) local = shape.at(axis), pieces = {{0, local}};
      Seed sd{g.nodes[a.ref].target, Shard::column, axis, {HeadSection{"experts", shape.at(axis), 1, false}}, false, 1};
      sd.sections[0].heads = shape.at(axis);
      sd.fixed = Slice{axis, std::move(pieces), zero && rank != 0};
      sd.line = fmt::format("{}: {}", sd.target, line);
      sd.local = local;
      group.push_back({name, std::move(sd)});
    };
    const int64_t r0 = rank * l;
    std::vector<std::pair<int64_t, int64_t>> up_pieces =
        !gate ? std::vector<std::pair<int64_t, int64_t>>{{r0, l}}
        : cat ? std::vector<std::pair<int64_t, int64_t>>{{r0, l}, {I + r0, l}}
              : std::vector<std::pair<int64_t, int64_t>>{{2 * r0, 2 * l}};
    const std::string per = fmt::format("{} of each expert's {} intermediate columns per rank", l, I);
    add("gate_up", gu_axis, up_pieces, false, fmt::format("experts' gate/up, column parallel (dim {}): {}", gu_axis, per));
    add("down", dn_axis, {{r0, l}}, false, fmt::format("experts' down, row parallel (dim {}): {}, then all-reduce", dn_axis, per));
    add("gate_up_bias", 1, up_pieces, false, "experts' gate/up bias, split as gate/up");
    add("down_bias", 1, {}, true, "experts' down bias, added on rank 0 only");
    int64_t Is = 0, ls = 0;
    if (has_arg(def, "shared_up")) {  // fuselm.experts_shared: the shared expert too
      const auto su = param_shape(g, node, def, "shared_up");
      Is = su.empty() ? 0 : su[0];
      ls = Is / n;
      const std::string sper = fmt::format("{} of the shared expert's {} intermediate columns per rank", ls, Is);
      add("shared_gate", 0, {{rank * ls, ls}}, false, "shared expert's gate, column parallel (dim 0): " + sper);
      add("shared_up", 0, {{rank * ls, ls}}, false, "shared expert's up, column parallel (dim 0): " + sper);
      add("shared_down", 1, {{rank * ls, ls}}, false, "shared expert's down, row parallel (dim 1): " + sper);
    }
    if (I % n != 0 || Is % n != 0) {
      out.replicated.push_back(fmt::format("{}: its experts' intermediate size {} (shared: {}) does not divide among {} "
                                           "ranks", where, I, Is, n));
      continue;
    }
    for (auto& [name, sd] : group) seeds.push_back(std::move(sd));
  }
}

namespace {

// The one linear with a parameter weight and `width` output columns found walking back from node
// `from` (stopping at every linear), or -1 when there is none or more than one.
int linear_behind(const ir::Graph& g, int from, int64_t width) {
  std::vector<int> todo{from};
  std::set<int> seen, found;
  while (!todo.empty()) {
    const int c = todo.back();
    todo.pop_back();
    if (!seen.insert(c).second) continue;
    const auto& m = g.nodes[c];
    if (ir::op_traits(m.op).tp == ir::TpRule::linear) {
      const int p = m.args.size() > 1 ? param_at(g, m.args[1]) : -1;
      if (p >= 0 && g.nodes[p].out.shape[0].value == width) found.insert(p);
      continue;
    }
    std::function<void(const ir::Arg&)> visit = [&](const ir::Arg& a) {
      if (a.kind == ir::Arg::Kind::ref) todo.push_back(a.ref);
      for (const auto& x : a.list) visit(x);
    };
    for (const auto& a : m.args) visit(a);
  }
  return found.size() == 1 ? *found.begin() : -1;
}

// The weight of the first linear with `width` input columns reached forward from node `from`, or -1.
int linear_after(const ir::Graph& g, int from, int64_t width) {
  std::set<int> reach{from};
  for (const auto& m : g.nodes) {
    if (m.index <= from) continue;
    bool reads = false;
    for (const auto& a : m.args) reads |= a.kind == ir::Arg::Kind::ref && reach.contains(a.ref);
    if (!reads) continue;
    if (ir::op_traits(m.op).tp == ir::TpRule::linear) {
      const int p = m.args.size() > 1 ? param_at(g, m.args[1]) : -1;
      return p >= 0 && g.nodes[p].out.shape[1].value == width ? p : -1;
    }
    reach.insert(m.index);
  }
  return -1;
}

}  // namespace

// MLA seeds (docs/mla.md): each fuselm.mla_attention's H heads. Its q projection (the linear behind
// q with H·(Dn+Dr) outputs) and its up-projection w_up column parallel by heads, the first linear
// after it (H·Dv inputs: the output projection) row parallel. The latent path (the q and kv
// down-projections, their norms, the rope key) and the latent cache stay whole on every rank.
void mla_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out) {
  auto seeded = [&](const std::string& t) {
    return std::any_of(seeds.begin(), seeds.end(), [&](const Seed& s) { return s.target == t; });
  };
  for (const auto& node : g.nodes) {
    if (ir::op_traits(node.op).tp != ir::TpRule::mla_attention) continue;
    const auto& def = ir::op_def(node.op);
    const auto& qa = node.args.at(def.arg("q"));
    const int wu = param_at(g, node.args.at(def.arg("w_up")));
    static const std::vector<ir::Dim> none;
    const auto& qm = qa.kind == ir::Arg::Kind::ref ? g.nodes[qa.ref].out.shape : none;
    const std::string where = wu >= 0 ? g.nodes[wu].target : node.name;
    if (wu < 0 || qm.size() != 4 || qm[1].symbolic() || qm[3].symbolic()) {
      out.replicated.push_back(fmt::format("{}: MLA whose query or up-projection is not a [1, H, T, D] value and a "
                                           "parameter",
                                           where));
      continue;
    }
    const int64_t H = qm[1].value, Dq = qm[3].value, Dn = node.args.at(def.arg("nope_dim")).i,
                  Dv = node.args.at(def.arg("v_dim")).i;
    const int qp = linear_behind(g, qa.ref, H * Dq), op = linear_after(g, node.index, H * Dv);
    if (H % n != 0 || qp < 0 || op < 0) {
      out.replicated.push_back(H % n != 0 ? fmt::format("{}: MLA's {} heads do not divide among {} ranks", where, H, n)
                                          : fmt::format("{}: MLA without one query projection ({} outputs) before it "
                                                        "and one output projection ({} inputs) after it",
                                                        where, H * Dq, H * Dv));
      continue;
    }
    if (seeded(g.nodes[qp].target) || seeded(g.nodes[wu].target) || seeded(g.nodes[op].target)) continue;
    seeds.push_back(Seed{g.nodes[qp].target, Shard::column, 0, {HeadSection{"q", H, Dq, false}}, false, 1});
    seeds.push_back(Seed{g.nodes[wu].target, Shard::column, 0, {HeadSection{"kv_up", H, Dn + Dv, false}}, false, 1});
    seeds.push_back(Seed{g.nodes[op].target, Shard::row, 1, {}, false, 1});
  }
}

// Row seeds must divide their input width; checked on the graph's parameter shapes.
void check_rows(const ir::Graph& g, const std::vector<Seed>& seeds, int64_t n) {
  for (const auto& node : g.nodes) {
    if (node.op != "placeholder") continue;
    for (const auto& s : seeds)
      if (s.target == node.target && s.kind == Shard::row) {
        const int64_t k = node.out.shape.at(s.axis).value;
        if (k % n != 0)
          throw std::runtime_error(fmt::format("tensor parallel size {}: {} (row parallel) has {} input columns, which "
                                               "do not divide among {} ranks",
                                               n, s.target, k, n));
      }
  }
}

}  // namespace fuselm::passes::shard
