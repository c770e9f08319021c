// The rewrite: fused nodes in place of the nodes they replace, then dead-node removal.
#include <algorithm>
#include <set>
#include <stdexcept>

#include "fusers/driver.h"
#include "ir/op_defs.h"
#include "ir/op_traits.h"

namespace fuselm::fusers::driver {
namespace {

// Where each accepted fusion's new nodes go, and which new node replaces each old one.
struct Placement {
  std::vector<std::vector<std::pair<size_t, size_t>>> insert_at;  // old node -> (accepted, new k)
  std::vector<std::pair<size_t, int>> replacement;                // old node -> (accepted, new k)
  std::vector<std::vector<std::pair<std::string, ir::Arg>>> updates;  // old node -> arguments set
};

Placement place(size_t n, const std::vector<Accepted>& accepted) {
  Placement p;
  p.insert_at.resize(n);
  p.replacement.assign(n, {SIZE_MAX, -1});
  p.updates.resize(n);
  for (size_t a = 0; a < accepted.size(); ++a) {
    const auto& f = accepted[a].fusion;
    for (const auto& u : f.updates) p.updates[u.node].emplace_back(u.arg, u.value);
    if (f.replaces.empty()) continue;
    int first = INT32_MAX;
    for (const auto& [old, r] : f.replaces) {
      first = std::min(first, old);
      p.replacement[old] = {a, r - kNewNode};
    }
    int at = first;
    for (size_t k = 0; k < f.nodes.size(); ++k) {
      at = std::max(at, f.nodes[k].place_before);
      p.insert_at[at].push_back({a, k});
    }
  }
  return p;
}

// A graph node as the rewritten graph holds it: arguments set by updates, refs renumbered.
ir::Node copy_node(const ir::Node& src, const std::vector<std::pair<std::string, ir::Arg>>& updates,
                   const std::vector<int>& map, int index) {
  ir::Node node = src;
  node.index = index;
  for (const auto& [name, value] : updates) node.args.at(ir::op_def(node.op).arg(name)) = value;
  for (auto& arg : node.args)
    for_each_ref(arg, [&](int& r) {
      if (map[r] < 0) throw std::logic_error("a node refers to a removed value");
      r = map[r];
    });
  return node;
}

}  // namespace

ir::Graph rewrite(const ir::Graph& g, std::vector<Accepted>& accepted, std::vector<WeightTransform>& weights) {
  const size_t n = g.nodes.size();
  const Placement p = place(n, accepted);
  ir::Graph out;
  out.version = g.version;
  out.capture_version = g.capture_version;
  out.modules = g.modules;
  out.op_args = g.op_args;
  for (const auto& d : ir::op_defs())
    if (d.source == ir::OpSource::fusers) out.op_args[std::string(d.name)] = {d.args.begin(), d.args.end()};
  out.parameters = g.parameters;
  out.constants = g.constants;
  out.model = g.model;
  std::vector<int> map(n, -1);
  std::vector<std::vector<int>> new_index(accepted.size());
  int counter = 0;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [a, k] : p.insert_at[i]) {
      auto& acc = accepted[a];
      const auto& nn = acc.fusion.nodes[k];
      ir::Node node;
      node.index = static_cast<int>(out.nodes.size());
      node.op = nn.op;
      node.args = nn.args;
      for (auto& arg : node.args)
        for_each_ref(arg, [&](int& r) {
          if (r >= kNewNode) r = new_index[a].at(r - kNewNode);
          else if (r >= static_cast<int>(i) || map[r] < 0)
            throw std::logic_error(fmt::format("fusion refers to node {} not yet emitted", r));
          else r = map[r];
        });
      node.out_kind = nn.out_kind;
      node.out = nn.out;
      node.outs = nn.outs;
      node.module_stack = g.nodes[acc.fusion.replaces.front().first].module_stack;
      if (nn.weight >= 0) {
        node.module_stack.clear();
        node.placeholder_kind = "parameter";
        node.target = acc.fusion.weights[nn.weight].target;
        node.name = "p_fused_" + std::to_string(counter++);
        weights.push_back(acc.fusion.weights[nn.weight]);
      } else {
        node.name = "fused_" + std::string(acc.fuser->name()) + "_" + std::to_string(counter++);
      }
      new_index[a].push_back(node.index);
      out.nodes.push_back(std::move(node));
    }
    if (p.replacement[i].first != SIZE_MAX) {
      map[i] = new_index[p.replacement[i].first].at(p.replacement[i].second);
      continue;
    }
    map[i] = static_cast<int>(out.nodes.size());
    out.nodes.push_back(copy_node(g.nodes[i], p.updates[i], map, map[i]));
  }
  for (int o : g.outputs) out.outputs.push_back(map[o]);
  remove_dead(out);
  return out;
}

namespace {

// The base a view reads (through views that alias their input, ir::OpTraits::aliases), where an
// in-place op's write lands.
int view_base(const ir::Graph& g, int r) {
  while (ir::op_traits(g.nodes[r].op).aliases && !g.nodes[r].args.empty() &&
         g.nodes[r].args[0].kind == ir::Arg::Kind::ref)
    r = g.nodes[r].args[0].ref;
  return r;
}

}  // namespace

// Dead nodes: keep graph outputs, inputs and ops with effects (ir::OpDef::has_effects: attention
// writes the KV cache). In-place ATen ops such as copy_ or scatter_ write into a tensor that later
// nodes read under its original name (MLA's key assembly, routers), so their own unused result
// says nothing: one lives exactly when the base it writes into does. Its readers come after it,
// so in this backward sweep the base's liveness is settled when the copy is reached; an expansion
// the mla fuser bypassed dies whole. The experts ops are pure: an experts op a fused
// fuselm.experts_shared replaced must die, or the routed experts would run twice.
void remove_dead(ir::Graph& out) {
  std::vector<char> live(out.nodes.size(), 0);
  for (int o : out.outputs) live[o] = 1;
  for (auto& node : out.nodes) {
    const ir::OpDef* def = ir::find_op_def(node.op);
    if ((node.op == "placeholder" && node.placeholder_kind == "input") || (def && def->has_effects()))
      live[node.index] = 1;
  }
  for (int i = static_cast<int>(out.nodes.size()) - 1; i >= 0; --i) {
    const auto& node = out.nodes[i];
    if (!live[i] && ir::op_traits(node.op).in_place && !node.args.empty() && node.args[0].kind == ir::Arg::Kind::ref &&
        live[view_base(out, node.args[0].ref)])
      live[i] = 1;
    if (live[i])  // a read through a view (transpose(key) built before the copies) keeps its base too
      for (const auto& a : out.nodes[i].args) for_each_ref(a, [&](int r) { live[r] = live[view_base(out, r)] = 1; });
  }
  std::vector<int> keep(out.nodes.size(), -1);
  std::vector<ir::Node> kept;
  for (auto& node : out.nodes) {
    if (!live[node.index]) continue;
    keep[node.index] = static_cast<int>(kept.size());
    node.index = keep[node.index];
    for (auto& a : node.args) for_each_ref(a, [&](int& r) { r = keep[r]; });
    kept.push_back(std::move(node));
  }
  out.nodes = std::move(kept);
  for (auto& o : out.outputs) o = keep[o];
  out.index_by_name.clear();
  for (const auto& node : out.nodes) out.index_by_name[node.name] = node.index;
}

}  // namespace fuselm::fusers::driver
