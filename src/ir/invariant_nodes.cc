#include "ir/invariant_nodes.h"

#include <algorithm>
#include <functional>

#include "ir/op_defs.h"
#include "ir/op_traits.h"

namespace fuselm::ir {
namespace {

// Calls f on every node an argument references; returns false when the argument (or a list
// member) is a symbolic size, which changes with the step's token count.
bool visit_refs(const Arg& a, const std::function<void(int)>& f) {
  if (a.kind == Arg::Kind::sym) return false;
  if (a.kind == Arg::Kind::ref) f(a.ref);
  bool ok = true;
  for (const auto& x : a.list) ok = visit_refs(x, f) && ok;
  return ok;
}

bool reads_only_invariants(const Node& node, const std::vector<bool>& inv) {
  bool all = true;
  for (const auto& a : node.args)
    if (!visit_refs(a, [&](int r) { all = all && inv[r]; })) return false;
  return all;
}

// One forward sweep: placeholders by kind, ops by what they read; `excluded` nodes are not.
std::vector<bool> sweep(const Graph& graph, const std::vector<bool>& excluded) {
  std::vector<bool> inv(graph.nodes.size(), false);
  for (const auto& node : graph.nodes) {
    const int i = node.index;
    if (excluded[i]) continue;
    if (node.op == "placeholder") {
      inv[i] = node.placeholder_kind == "parameter" || node.placeholder_kind == "constant";
      continue;
    }
    // fuselm ops may read the batch, the KV cache or a recurrent state; in-place ops write.
    if (find_op_def(node.op) != nullptr || op_traits(node.op).in_place) continue;
    inv[i] = reads_only_invariants(node, inv);
  }
  return inv;
}

// Marks every invariant node that node i was computed from (itself included). The walk goes
// through nodes that are not invariant too: a view with a symbolic size of an invariant value
// still writes into it.
void mark_sources(const Graph& graph, int i, const std::vector<bool>& inv, std::vector<bool>& seen,
                  std::vector<bool>& out) {
  if (seen[i]) return;
  seen[i] = true;
  if (inv[i]) out[i] = true;
  for (const auto& a : graph.nodes[i].args) visit_refs(a, [&](int r) { mark_sources(graph, r, inv, seen, out); });
}

}  // namespace

std::vector<bool> invariant_nodes(const Graph& graph) {
  std::vector<bool> excluded(graph.nodes.size(), false);
  for (int o : graph.outputs) excluded[o] = true;
  const std::vector<bool> first = sweep(graph, excluded);
  std::vector<bool> seen(graph.nodes.size(), false);
  for (const auto& node : graph.nodes) {
    if (!op_traits(node.op).in_place || node.args.empty()) continue;
    visit_refs(node.args[0], [&](int r) { mark_sources(graph, r, first, seen, excluded); });
  }
  return sweep(graph, excluded);
}

}  // namespace fuselm::ir
