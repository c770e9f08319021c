#pragma once
// The roles of a multi-head latent attention module, found by dataflow (src/fusers/mla.cc has
// the signature; docs/mla.md the table). Widths are checked by the fuser's validate.
#include <optional>

#include "fusers/pattern.h"

namespace fuselm::fusers::mla {

struct Roles {
  int att = -1;       // the module's fuselm.attention op
  int q = -1;         // its q operand [1, H, T, Dn+Dr]
  int latent = -1;    // the up-projection's input: the normalized latent [..., T, R]
  int k_rot = -1;     // the rope key, one head [1, 1, T, Dr], before the broadcast over heads
  int out_proj = -1;  // the output projection's result
  LinearLike up, down, q_linear;       // kv_b (up), kv_a (down), the projection producing q
  std::optional<LinearLike> q_down;  // q-LoRA's down-projection
  int up_split = -1;    // split(up(·), [Dn, Dv], -1): Dn, Dv are its sizes
  int down_split = -1;  // split(down(x), [R, Dr], -1)
};

/// The MLA roles of sg's attention op. Not a candidate (why.not_applicable) when no projection
/// feeds both k and v without reaching q; otherwise nullopt with the reason, or the roles.
std::optional<Roles> analyze(const Subgraph& sg, Why& why);

/// Size k (0 or 1) of a two-way split node's literal sizes.
int64_t split_size(const ir::Graph& g, int split, int k);

}  // namespace fuselm::fusers::mla
