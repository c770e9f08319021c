#include "ir/op_defs.h"

#include <fmt/core.h>

#include <stdexcept>

namespace fuselm::ir {

size_t OpDef::arg(std::string_view n) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == n) return i;
  throw std::logic_error(fmt::format("op {} has no argument '{}'", name, n));
}

namespace {

// Traits of an entry (ir/op_traits.h): its tensor-parallel rule, and whether it is row-wise.
OpTraits tp(TpRule rule, bool rowwise = false) {
  OpTraits t;
  t.tp = rule;
  t.rowwise = rowwise;
  return t;
}

}  // namespace

std::span<const OpDef> op_defs() {
  // Semantics and shapes: the op's file in src/runtime/ops/ (named after the op). Traits: an entry
  // without them is not row-wise and replicates a tensor-parallel split (what the ops the passes
  // put in, and the router, need).
  static const std::vector<OpDef> kDefs = {
      {"fuselm.attention.default",  // attention_op.cc; capture: python/fuselm_capture/ops.py
       {"q", "k", "v", "sinks", "scaling", "sliding_window", "softcap", "layer_idx", "chunk_size", "mask",
        "alibi_slopes"},
       OpSource::capture, KvRows::heads, "layer_idx", tp(TpRule::attention)},
      {"fuselm.experts.default",  // experts_op.cc; capture: python/fuselm_capture/ops.py
       {"hidden", "top_k_index", "top_k_weights", "gate_up", "down", "gate_up_bias", "down_bias", "activation",
        "is_concatenated", "is_transposed", "has_gate", "alpha", "limit"},
       OpSource::capture, KvRows::none, "", tp(TpRule::experts)},
      {"fuselm.experts_shared.default",  // experts_op.cc; the moe fuser
       {"hidden", "top_k_index", "top_k_weights", "gate_up", "down", "gate_up_bias", "down_bias", "activation",
        "is_concatenated", "is_transposed", "has_gate", "alpha", "limit", "shared_gate", "shared_up", "shared_down",
        "shared_scale", "shared_activation"},
       OpSource::fusers, KvRows::none, "", tp(TpRule::experts)},
      // fused_ops.cc; the rms_norm fuser. Over the last dim: row-wise.
      {"fuselm.rms_norm.default", {"input", "weight", "eps", "weight_offset"}, OpSource::fusers, KvRows::none, "",
       tp(TpRule::rms_norm, true)},
      // fused_ops.cc; the glu fusers. Halves of the last dim: row-wise.
      {"fuselm.act_and_mul.default", {"input", "activation"}, OpSource::fusers, KvRows::none, "",
       tp(TpRule::act_and_mul, true)},
      // fused_ops.cc; the rope fuser.
      {"fuselm.rope.default", {"input", "cos", "sin", "pairing"}, OpSource::fusers, KvRows::none, "",
       tp(TpRule::rope)},
      // fused_ops.cc; the softcap fuser. c · tanh(x / c), elementwise: pointwise and row-wise.
      {"fuselm.softcap.default", {"input", "cap"}, OpSource::fusers, KvRows::none, "", [] {
         OpTraits t = tp(TpRule::pointwise, true);
         t.pointwise = true;
         return t;
       }()},
      {"fuselm.mla_attention.default",  // mla_op.cc; the mla fuser
       {"q", "latent", "k_rot", "w_up", "scaling", "layer_idx", "nope_dim", "v_dim"},
       OpSource::fusers, KvRows::latent, "layer_idx", tp(TpRule::mla_attention)},
      {"fuselm.moe_route.default",  // moe_route_op.cc; the moe fuser
       {"input", "gate_weight", "correction_bias", "scoring", "groups", "topk_group", "group_score", "top_k", "renorm",
        "renorm_eps", "scaling"}},
      {"fuselm.all_reduce.default", {"input"}},  // dist_ops.cc; the TP sharding plan (src/passes/shard_plan.cc)
      {"fuselm.all_gather.default", {"input"}},  // dist_ops.cc; the vocab-parallel LM head (src/passes/shard_plan.cc)
      // matmul_ops.cc; the vocab-parallel table: a lookup that may read a quantized table.
      {"fuselm.vocab_embedding.default", {"weight", "indices", "first"}, OpSource::fusers, KvRows::none, "",
       [] {
         OpTraits t;
         t.quant_weight = 0;
         t.lookup = true;
         return t;
       }()},
      {"fuselm.rms_norm_split.default",  // dist_ops.cc; an RMSNorm over a width split across ranks
       {"input", "weight", "eps", "weight_offset", "width"}},
      {"fuselm.select_rows.default", {"input"}},  // select_rows_op.cc; inserted by the engine before the LM head
  };
  return kDefs;
}

const OpDef* find_op_def(std::string_view name) {
  for (const auto& d : op_defs())
    if (d.name == name) return &d;
  return nullptr;
}

const OpDef& op_def(std::string_view name) {
  if (const OpDef* d = find_op_def(name)) return *d;
  throw std::logic_error(fmt::format("no op definition for {}", name));
}

}  // namespace fuselm::ir
