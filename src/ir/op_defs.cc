#include "ir/op_defs.h"

#include <fmt/core.h>

#include <stdexcept>

#include "ir/graph.h"

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

// ---- the recurrent ops' state sizes (docs/recurrent.md) ---------------------------------------
// Each reads its operands' static sizes; a symbolic or missing one (or operands that disagree) is
// 0 with `error` naming the op and the operand.

/// The static size of dim `dim` of argument `arg` of stateful op node `n`, or -1 with `error` set.
int64_t static_dim(const Graph& g, const Node& n, std::string_view arg, int dim, std::string& error) {
  const OpDef& d = op_def(n.op);
  const size_t i = d.arg(arg);
  const Arg* a = i < n.args.size() ? &n.args[i] : nullptr;
  if (!a || a->kind != Arg::Kind::ref || a->ref < 0 || a->ref >= static_cast<int>(g.nodes.size())) {
    error = fmt::format("{}: argument '{}' is not a tensor", d.name, arg);
    return -1;
  }
  const auto& shape = g.nodes[a->ref].out.shape;
  const int rank = static_cast<int>(shape.size());
  const int k = dim < 0 ? dim + rank : dim;
  if (k < 0 || k >= rank || shape[k].symbolic() || shape[k].value <= 0) {
    error = fmt::format("{}: dim {} of argument '{}' is not a static size", d.name, dim, arg);
    return -1;
  }
  return shape[k].value;
}

/// a * b * c when every factor is known (> 0), else 0 (error already set).
int64_t product(int64_t a, int64_t b, int64_t c = 1) { return a > 0 && b > 0 && c > 0 ? a * b * c : 0; }

// causal_conv1d: the last K-1 inputs of each of the C channels, [K-1][C] (C floats for K = 1).
int64_t conv1d_state(const Graph& g, const Node& n, std::string& error) {
  const int64_t c = static_dim(g, n, "weight", 0, error), k = static_dim(g, n, "weight", -1, error);
  return product(c, k > 1 ? k - 1 : (k == 1 ? 1 : -1));
}

// ssd_scan: [H][P][N], H and P from x [1,T,H,P], N from B [1,T,G,N].
int64_t ssd_state(const Graph& g, const Node& n, std::string& error) {
  return product(static_dim(g, n, "x", 2, error), static_dim(g, n, "x", 3, error), static_dim(g, n, "B", -1, error));
}

// selective_scan: [Dm][N] from A [Dm, N].
int64_t selective_state(const Graph& g, const Node& n, std::string& error) {
  return product(static_dim(g, n, "A", 0, error), static_dim(g, n, "A", 1, error));
}

// gated_delta_rule: [Hv][Dk][Dv], Dk from k [1,T,Hk,Dk], Hv and Dv from v [1,T,Hv,Dv].
int64_t delta_rule_state(const Graph& g, const Node& n, std::string& error) {
  return product(static_dim(g, n, "v", 2, error), static_dim(g, n, "k", 3, error), static_dim(g, n, "v", 3, error));
}

// decay_softmax_scan: [3][C] (num, den, exponent) from w [C].
int64_t softmax_scan_state(const Graph& g, const Node& n, std::string& error) {
  return product(3, static_dim(g, n, "w", 0, error));
}

// linear_scan: [C], h after the last token, from b [1, T, C].
int64_t linear_scan_state(const Graph& g, const Node& n, std::string& error) {
  return static_dim(g, n, "b", 2, error);
}

/// A stateful op of capture (recurrent_ops.py): replicated under tensor parallelism (the op stays
/// whole on every rank), its state index in "state_idx".
OpDef recurrent(std::string_view name, std::vector<std::string_view> args, StateSize size) {
  OpDef d{name, std::move(args), OpSource::capture, KvRows::none, "", OpTraits{}};
  d.state = "state_idx";
  d.state_size = size;
  return d;
}

/// d with arguments that only capture fills (OpDef::none_in_ir).
OpDef capture_only(OpDef d, std::vector<std::string_view> args) {
  d.none_in_ir = std::move(args);
  return d;
}

}  // namespace

std::span<const OpDef> op_defs() {
  // Semantics and shapes: the op's file in src/runtime/ops/ (named after the op). Traits: an entry
  // without them is not row-wise and replicates a tensor-parallel split (what the ops the passes
  // put in, and the router, need).
  static const std::vector<OpDef> kDefs = {
      capture_only({"fuselm.attention.default",  // attention_op.cc; capture: python/fuselm_capture/ops.py
                    {"q", "k", "v", "sinks", "scaling", "sliding_window", "softcap", "layer_idx", "chunk_size",
                     "mask", "alibi_slopes", "key_select"},
                    OpSource::capture, KvRows::heads, "layer_idx", tp(TpRule::attention)},
                   {"key_select"}),
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
      // recurrent_ops.cc; capture: python/fuselm_capture/recurrent_ops.py (docs/recurrent.md).
      recurrent("fuselm.causal_conv1d.default", {"x", "weight", "bias", "activation", "state_idx"}, conv1d_state),
      recurrent("fuselm.ssd_scan.default",
                {"x", "dt", "A", "B", "C", "D", "dt_bias", "dt_softplus", "dt_min", "dt_max", "state_idx"}, ssd_state),
      recurrent("fuselm.selective_scan.default",
                {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "dt_softplus", "state_idx"}, selective_state),
      recurrent("fuselm.gated_delta_rule.default", {"q", "k", "v", "g", "beta", "use_qk_l2norm", "state_idx"},
                delta_rule_state),
      recurrent("fuselm.decay_softmax_scan.default", {"k", "v", "w", "u", "state_idx"}, softmax_scan_state),
      recurrent("fuselm.linear_scan.default", {"a", "b", "state_idx"}, linear_scan_state),
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
