#pragma once
// The stateful (recurrent) ops of a graph (docs/recurrent.md): each names its state by index
// (the op's state_idx argument) and knows the size of one sequence's state (ir::OpDef::state_size).
// The engine sizes the StateCache from them; inspect lists them.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fuselm::engine {

struct StateOp {
  std::string op;      // "fuselm.ssd_scan"
  std::string module;  // the module whose call it is
  int64_t state_idx = 0;
  int64_t floats = 0;  // f32 values of state per sequence
};

/// The stateful ops of g in state_idx order (index i holds state i). Throws std::runtime_error, one
/// line naming the module, when an op's state_idx is not a non-negative integer, its state size is
/// not static, an index is used twice, or the indices leave a gap (they must be 0..n-1).
std::vector<StateOp> stateful_ops(const ir::Graph& g);

/// Floats per sequence of each state, in state_idx order (kv::StateCache's sizes).
std::vector<int64_t> state_floats(const std::vector<StateOp>& ops);

}  // namespace fuselm::engine
