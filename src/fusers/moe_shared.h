#pragma once
// The shared expert of an MoE block, read from the graph (the moe fuser sums it into the fused
// experts op; src/fusers/moe.cc has the signature). Structure only, never a name.
#include <string>

#include "fusers/fuser.h"

namespace fuselm::fusers {

struct SharedExpert {
  std::string kind = "none";  // none | gated | ungated
  int add = -1;               // add(routed output, shared output): replaced by the fused op
  int scale = -1;             // [1, H] weight of the sigmoid gate, or -1 (ungated)
  int gate = -1, up = -1, down = -1;  // weight parameters; gate = -1 for a plain (non-GLU) MLP
  std::string act;            // silu | gelu | gelu_tanh | relu
  int glu_mul = -1;           // the GLU's gating multiply (claimed, so the glu fuser leaves it)
  std::string declined;       // why it is reported but not summed in ("" when it can be)
};

/// The shared expert beside `experts` whose input views the same tensor as `x`.
SharedExpert read_shared(const ir::Graph& g, const Subgraph& sg, int experts, int x);

}  // namespace fuselm::fusers
