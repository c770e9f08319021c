#include "engine/state_ops.h"

#include <fmt/core.h>

#include <map>
#include <stdexcept>

#include "ir/op_defs.h"

namespace fuselm::engine {
namespace {

std::string module_of(const ir::Graph& g, const ir::Node& n) {
  return n.module_stack.empty() ? "<root>" : g.modules[n.module_stack.back()].path;
}

StateOp state_op(const ir::Graph& g, const ir::Node& n, const ir::OpDef& def) {
  StateOp s{n.op, module_of(g, n)};
  const size_t at = def.arg(def.state);
  const ir::Arg idx = at < n.args.size() ? n.args[at] : ir::Arg{};
  if (idx.kind != ir::Arg::Kind::integer || idx.i < 0)
    throw std::runtime_error(fmt::format("{} in module {}: its state index is not a non-negative integer", n.op, s.module));
  s.state_idx = idx.i;
  std::string error;
  s.floats = def.state_size ? def.state_size(g, n, error) : 0;
  if (s.floats <= 0)
    throw std::runtime_error(fmt::format("{} in module {}: no static state size{}{}", n.op, s.module,
                                         error.empty() ? "" : ": ", error));
  return s;
}

}  // namespace

std::vector<StateOp> stateful_ops(const ir::Graph& g) {
  std::map<int64_t, StateOp> by_idx;
  for (const auto& n : g.nodes) {
    const ir::OpDef* def = ir::find_op_def(n.op);
    if (!def || def->state.empty()) continue;
    StateOp s = state_op(g, n, *def);
    auto [it, fresh] = by_idx.emplace(s.state_idx, s);
    if (!fresh)
      throw std::runtime_error(fmt::format("state index {} is used twice: by {} in module {} and {} in module {}",
                                           s.state_idx, it->second.op, it->second.module, s.op, s.module));
  }
  std::vector<StateOp> out;
  for (auto& [idx, s] : by_idx) {
    if (idx != static_cast<int64_t>(out.size()))
      throw std::runtime_error(fmt::format("no stateful op holds state index {} (the next, {}, is {} in module {})",
                                           out.size(), idx, s.op, s.module));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int64_t> state_floats(const std::vector<StateOp>& ops) {
  std::vector<int64_t> out;
  for (const auto& s : ops) out.push_back(s.floats);
  return out;
}

}  // namespace fuselm::engine
