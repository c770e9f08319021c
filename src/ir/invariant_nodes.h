#pragma once
// Nodes whose value is the same at every step: computed from parameters and constants alone
// (a norm's `1 + weight`, a state-space layer's `-exp(A_log)`, weights cast, stacked or
// concatenated for an experts op). The executor computes them once, when it is built, and keeps them.
#include <vector>

#include "ir/graph.h"

namespace fuselm::ir {

/// Per node index: whether the node's value is step-invariant. A node is when it is a parameter
/// or constant placeholder, or an op without an engine definition (ATen, getitem, shape
/// arithmetic: none of them reads the batch, the KV cache or a state) that is not in place, reads
/// no symbolic size, and whose every referenced argument is invariant. An invariant value that an
/// in-place op writes (directly or through a view, op_traits.h `in_place`) is not, nor anything
/// it was computed from (through any op: a view with a symbolic size still aliases it) or
/// anything computed from it: a kept copy would carry one step's write into the next. Graph outputs are never invariant (the caller hands them out each run).
std::vector<bool> invariant_nodes(const Graph& graph);

}  // namespace fuselm::ir
