#pragma once
// Reading an MoE router out of the captured graph (the moe fuser's matcher; src/fusers/moe.cc has
// the whole signature). Structure only: ops, dataflow, literals; never a name.
#include <optional>
#include <string>

#include "fusers/fuser.h"

namespace fuselm::fusers {

/// A router proven from the graph. Node indices are graph nodes.
struct Router {
  // x: the gate's input; weight: the gate's [E, H] parameter; correction: the [E] bias or -1;
  // ids / weights: the two values the experts op reads (replaced by the routing op)
  int x = -1, weight = -1, correction = -1;
  std::string scoring;  // softmax | sigmoid | softmax_of_topk
  bool upcast = false;
  int64_t groups = 1, topk_group = 1;
  std::string group_score = "none";  // none | top2_sum | max
  int64_t top_k = 0;
  bool renorm = false;
  double renorm_eps = 0.0, scaling = 1.0;
  int ids = -1, weights = -1;
};

/// Walks back from the experts op's top-k index and weights to the gate; nullopt with the reason.
std::optional<Router> read_router(const ir::Graph& g, const Subgraph& sg, int experts, Why& why);

/// node i as getitem(·, k).
bool is_getitem(const ir::Node& n, int64_t k);
const ir::Node* node_of(const ir::Graph& g, int i);

}  // namespace fuselm::fusers
