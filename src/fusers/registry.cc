// The fuser registry: one ordered list. The first rewriting fuser that matches a module wins;
// additive fusers (attention) attach alongside. Adding a fuser = one file + one line here.
#include "fusers/fuser.h"

namespace fuselm::fusers {

const Fuser& moe_fuser();
const Fuser& qkv_fuser();
const Fuser& glu_fuser();
const Fuser& rms_norm_fuser();
const Fuser& attention_fuser();

std::span<const Fuser* const> registry() {
  static const Fuser* const kFusers[] = {
      &moe_fuser(),        // an MoE block: its router, before glu could claim the block's own multiply
      &qkv_fuser(),        // an attention module: three projections feeding q, k, v
      &glu_fuser(),        // an MLP block: gate/up projections under one module
      &rms_norm_fuser(),   // a norm module (leaf): never overlaps a GLU's nodes
      &attention_fuser(),  // additive: attaches the engine's attention site
  };
  return kFusers;
}

}  // namespace fuselm::fusers
