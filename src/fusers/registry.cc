// The fuser registry: one ordered list. The first rewriting fuser that matches a module wins;
// additive fusers (attention) and composing ones (rope) apply alongside. Adding a fuser = one file + one line here.
#include "fusers/fuser.h"

namespace fuselm::fusers {

const Fuser& moe_fuser();
const Fuser& mla_fuser();
const Fuser& packed_qkv_fuser();
const Fuser& qkv_fuser();
const Fuser& glu_fuser();
const Fuser& packed_glu_fuser();
const Fuser& rms_norm_fuser();
const Fuser& rope_fuser();
const Fuser& attention_fuser();

std::span<const Fuser* const> registry() {
  static const Fuser* const kFusers[] = {
      &moe_fuser(),         // an MoE block: its router, before glu could claim the block's own multiply
      &mla_fuser(),         // before packed_qkv/qkv: an MLA module's attention also reads projections
      &packed_qkv_fuser(),  // before qkv: one projection cut into (q, k, v) pieces
      &qkv_fuser(),         // an attention module: three projections feeding q, k, v
      &glu_fuser(),         // an MLP block: gate/up projections under one module
      &packed_glu_fuser(),  // an MLP block whose gate and up are one projection's halves
      &rms_norm_fuser(),    // a norm module (leaf): never overlaps a GLU's nodes
      &rope_fuser(),        // composes: x·cos + rotate_half(x)·sin beside the module's qkv fusion
      &attention_fuser(),   // additive: attaches the engine's attention site
  };
  return kFusers;
}

}  // namespace fuselm::fusers
