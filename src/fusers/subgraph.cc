// Subgraphs (one per module) and the graph-wide user list; the Fusion and HeadSection helpers.
#include <algorithm>
#include <set>

#include "fusers/driver.h"

namespace fuselm::fusers {
namespace driver {

void for_each_ref(ir::Arg& a, const std::function<void(int&)>& f) {
  if (a.kind == ir::Arg::Kind::ref) f(a.ref);
  for (auto& x : a.list) for_each_ref(x, f);
}

void for_each_ref(const ir::Arg& a, const std::function<void(int)>& f) {
  if (a.kind == ir::Arg::Kind::ref) f(a.ref);
  for (const auto& x : a.list) for_each_ref(x, f);
}

std::vector<std::vector<int>> build_users(const ir::Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (const auto& n : g.nodes)
    for (const auto& a : n.args)
      for_each_ref(a, [&](int r) {
        if (users[r].empty() || users[r].back() != n.index) users[r].push_back(n.index);
      });
  return users;
}

std::vector<Subgraph> build_subgraphs(const ir::Graph& g, const std::vector<std::vector<int>>& users) {
  std::vector<Subgraph> sgs(g.modules.size());
  for (size_t m = 0; m < sgs.size(); ++m) {
    sgs[m].graph = &g;
    sgs[m].users = &users;
    sgs[m].module = static_cast<int>(m);
  }
  for (const auto& n : g.nodes) {
    if (n.op == "placeholder") continue;
    for (int m : n.module_stack) {
      if (m < 0 || m >= static_cast<int>(sgs.size())) continue;
      if (sgs[m].nodes.empty() || sgs[m].nodes.back() != n.index) sgs[m].nodes.push_back(n.index);
    }
    if (!n.module_stack.empty()) sgs[n.module_stack.back()].own.push_back(n.index);
  }
  std::set<int> outs(g.outputs.begin(), g.outputs.end());
  for (auto& sg : sgs) {
    std::set<int> seen;
    for (int i : sg.nodes) {
      for (const auto& a : g.nodes[i].args)
        for_each_ref(a, [&](int r) {
          if (!sg.contains(r) && seen.insert(r).second) sg.inputs.push_back(r);
        });
      bool out = outs.count(i) > 0;
      for (int u : users[i]) out = out || !sg.contains(u);
      if (out) sg.outputs.push_back(i);
    }
  }
  return sgs;
}

}  // namespace driver

bool Subgraph::contains(int i) const { return std::binary_search(nodes.begin(), nodes.end(), i); }
bool Subgraph::owns(int i) const { return std::binary_search(own.begin(), own.end(), i); }
std::vector<int> Subgraph::own_of(std::string_view op) const {
  std::vector<int> out;
  for (int i : own)
    if (graph->nodes[i].op == op) out.push_back(i);
  return out;
}

std::string_view shard_name(Shard s) {
  switch (s) {
    case Shard::none: return "replicated";
    case Shard::column: return "column";
    case Shard::row: return "row";
  }
  return "?";
}

void Fusion::for_each_ref(const std::function<void(int&)>& f) {
  for (auto& n : nodes) {
    for (auto& a : n.args) driver::for_each_ref(a, f);
    if (n.place_before >= 0) f(n.place_before);
  }
  for (auto& [old, repl] : replaces) f(old);
  for (auto& w : weights)
    for (auto& s : w.sources) f(s);
  for (auto& s : shards) f(s.param);
  for (auto& u : updates) {
    f(u.node);
    driver::for_each_ref(u.value, f);
  }
}

std::optional<int64_t> HeadSection::per_rank(int64_t tp) const {
  if (tp <= 0 || heads <= 0) return std::nullopt;
  if (heads % tp == 0) return heads / tp * head_dim;
  if (replicable && heads < tp && tp % heads == 0) return head_dim;
  return std::nullopt;
}

std::string HeadSection::expr() const {
  if (heads == 1 && replicable) return std::to_string(head_dim);
  return replicable ? fmt::format("max(1,{}/tp)*{}", heads, head_dim) : fmt::format("{}/tp*{}", heads, head_dim);
}

}  // namespace fuselm::fusers
