// fuselm.experts: one call of a mixture-of-experts experts module (docs/moe.md).
//   fuselm.experts(hidden [T,H], top_k_index [T,k] int, top_k_weights [T,k], gate_up, down,
//                  gate_up_bias?, down_bias?, activation, is_concatenated, is_transposed, has_gate,
//                  alpha, limit) -> [T,H]
//   gate_up [E, n_up, H] and down [E, H, I], or [E, H, n_up] and [E, I, H] when is_transposed;
//   n_up = 2·I with a gate. activation: silu | gelu | gelu_tanh | relu | relu2 (relu(x)²) | clamped_swiglu;
//   a named activation with limit > 0 is act(clamp(gate, max=limit)) · clamp(up, -limit, limit).
// fuselm.experts_shared(the same 13 arguments, shared_gate [Is, H]?, shared_up [Is, H],
//                       shared_down [H, Is], shared_scale [1, H]?, shared_activation) -> [T, H]:
//   the same plus the block's shared expert on every token, scaled by sigmoid(x · shared_scale)
//   when given (inserted by the moe fuser, src/fusers/moe.cc).
#include <string>

#include "kernels/cpu/moe.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

kernels::ExpertsAct act_named(OpCall& c, const std::string& a) {
  if (a == "silu") return kernels::ExpertsAct::silu;
  if (a == "gelu") return kernels::ExpertsAct::gelu;
  if (a == "gelu_tanh") return kernels::ExpertsAct::gelu_tanh;
  if (a == "relu") return kernels::ExpertsAct::relu;
  if (a == "relu2") return kernels::ExpertsAct::relu2;
  c.fail("activation '" + a + "' is none of silu, gelu, gelu_tanh, relu, relu2");
}

kernels::DType weight_kind(OpCall& c, const Tensor& w, const Tensor& other) {
  if (w.dtype != other.dtype)
    c.fail("gate_up " + w.describe() + " and down " + other.describe() + " have different dtypes");
  return weight_storage(c, w, "expert weight");
}

/// The routed experts' activation and gating (k.act, k.gate) from the op's string arguments; a
/// named activation with k.limit > 0 is act(clamp(gate, max=limit)) · clamp(up, -limit, limit).
void read_activation(OpCall& c, kernels::ExpertsArgs& k, bool has_gate) {
  const Value& act = c.arg("activation");
  if (act.kind != Value::Kind::string || !act.s) c.fail("activation is not a string");
  const std::string a = act.s;
  if (a == "clamped_swiglu") k.gate = kernels::ExpertsGate::clamped_swiglu;
  else if (a == "silu" || a == "gelu" || a == "gelu_tanh" || a == "relu" || a == "relu2") k.act = act_named(c, a);
  else c.fail("activation '" + a + "' is none of silu, gelu, gelu_tanh, relu, relu2, clamped_swiglu");
  if (!(k.limit >= 0.0f)) c.fail("limit " + std::to_string(k.limit) + " is negative or NaN");
  if (k.gate == kernels::ExpertsGate::act_mul && k.limit > 0.0f) k.gate = kernels::ExpertsGate::clamped_act_mul;
  if (!has_gate) {
    if (k.gate != kernels::ExpertsGate::act_mul) c.fail(a + " with limit " + std::to_string(k.limit) + " needs a gate");
    k.gate = kernels::ExpertsGate::act_only;
  }
}

/// Checks the shapes of hidden [T, H], the top-k [T, k] tensors and the stacked expert weights
/// and fills the sizes and weight pointers of k; returns n_up (the gate/up rows per expert).
int64_t read_weights(OpCall& c, kernels::ExpertsArgs& k, bool transposed, bool has_gate) {
  const Tensor& x = c.tensor("hidden");
  const Tensor& ids = c.tensor("top_k_index");
  const Tensor& wts = c.tensor("top_k_weights");
  const Tensor& gate_up = c.tensor("gate_up");
  const Tensor& down = c.tensor("down");
  if (x.ndim != 2) c.fail("hidden states must be [T, H], got " + x.describe());
  if (ids.ndim != 2 || ids.shape[0] != x.shape[0] || wts.ndim != 2 || wts.shape[0] != x.shape[0] ||
      wts.shape[1] != ids.shape[1])
    c.fail("top-k index " + ids.describe() + " and weights " + wts.describe() + " do not match hidden " +
           x.describe());
  if (gate_up.ndim != 3 || down.ndim != 3 || gate_up.shape[0] != down.shape[0])
    c.fail("expert weights gate_up " + gate_up.describe() + " and down " + down.describe() + " are not [E, ., .]");
  if (!gate_up.is_contiguous() || !down.is_contiguous()) c.fail("expert weights must be contiguous");
  k.t = x.shape[0];
  k.k = ids.shape[1];
  k.h = x.shape[1];
  k.e = gate_up.shape[0];
  const int64_t n_up = transposed ? gate_up.shape[2] : gate_up.shape[1];
  k.i = transposed ? down.shape[1] : down.shape[2];
  const int64_t h_up = transposed ? gate_up.shape[1] : gate_up.shape[2];
  const int64_t h_down = transposed ? down.shape[2] : down.shape[1];
  if (h_up != k.h || h_down != k.h || n_up != (has_gate ? 2 * k.i : k.i))
    c.fail("expert weights gate_up " + gate_up.describe() + " and down " + down.describe() +
           " do not fit hidden " + x.describe() + (transposed ? " (transposed layout)" : ""));
  k.w_dtype = weight_kind(c, gate_up, down);
  k.layout = transposed ? kernels::WeightLayout::kn : kernels::WeightLayout::nk;
  k.gate_up = gate_up.data;
  k.down = down.data;
  return n_up;
}

/// The optional per-expert biases as f32 (held by the scratches until the kernel has run).
void read_biases(OpCall& c, kernels::ExpertsArgs& k, int64_t n_up, Scratch& s_up, Scratch& s_down) {
  if (c.has("gate_up_bias")) {
    Tensor b = contiguous_as(c.tensor("gate_up_bias"), DType::f32, s_up);
    if (b.numel() != k.e * n_up) c.fail("gate_up bias " + b.describe() + " is not [E, n_up]");
    k.gate_up_bias = b.ptr<float>();
  }
  if (c.has("down_bias")) {
    Tensor b = contiguous_as(c.tensor("down_bias"), DType::f32, s_down);
    if (b.numel() != k.e * k.h) c.fail("down bias " + b.describe() + " is not [E, H]");
    k.down_bias = b.ptr<float>();
  }
}

/// fuselm.experts_shared's shared expert (gate?, up, down, scale?, activation) into k.
void read_shared(OpCall& c, kernels::ExpertsArgs& k) {
  const Tensor& up = c.tensor("shared_up");
  const Tensor& dn = c.tensor("shared_down");
  const Value& sa = c.arg("shared_activation");
  if (sa.kind != Value::Kind::string || !sa.s) c.fail("shared activation is not a string");
  k.shared_act = act_named(c, sa.s);
  k.shared_i = up.ndim == 2 ? up.shape[0] : -1;
  auto check = [&](const Tensor& w, int64_t rows, int64_t cols, const char* what) {
    if (w.ndim != 2 || w.shape[0] != rows || w.shape[1] != cols || !w.is_contiguous() || w.dtype != up.dtype)
      c.fail(std::string("shared ") + what + " weight " + w.describe() + " is not a contiguous [" +
             std::to_string(rows) + ", " + std::to_string(cols) + "] of the up weight's dtype");
  };
  check(up, k.shared_i, k.h, "up");
  check(dn, k.h, k.shared_i, "down");
  if (c.has("shared_gate")) {
    check(c.tensor("shared_gate"), k.shared_i, k.h, "gate");
    k.shared_gate = c.tensor("shared_gate").data;
  }
  if (c.has("shared_scale")) {
    check(c.tensor("shared_scale"), 1, k.h, "scale");
    k.shared_scale = c.tensor("shared_scale").data;
  }
  k.shared_dtype = weight_kind(c, up, dn);
  k.shared_up = up.data;
  k.shared_down = dn.data;
}

void experts(OpCall& c) {
  const bool concatenated = c.boolean("is_concatenated"), transposed = c.boolean("is_transposed"),
             has_gate = c.boolean("has_gate");
  kernels::ExpertsArgs k;
  k.alpha = static_cast<float>(c.real("alpha"));
  k.limit = static_cast<float>(c.real("limit"));
  read_activation(c, k, has_gate);
  k.interleaved = !concatenated;
  const int64_t n_up = read_weights(c, k, transposed, has_gate);

  const Tensor& x = c.tensor("hidden");
  Scratch sx(c.ctx), si(c.ctx), sw(c.ctx), sb1(c.ctx), sb2(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, sx);
  Tensor ic = contiguous_as(c.tensor("top_k_index"), DType::i64, si);
  Tensor wc = contiguous_as(c.tensor("top_k_weights"), DType::f32, sw);
  read_biases(c, k, n_up, sb1, sb2);
  if (c.node.op == "fuselm.experts_shared.default") read_shared(c, k);  // the block's shared expert
  k.x = xc.ptr<float>();
  k.ids = ic.ptr<int64_t>();
  k.weights = wc.ptr<float>();
  Tensor y = c.alloc(DType::f32, x.sizes());
  k.y = y.ptr<float>();
  kernels::experts(k);
  if (c.out_dtype() != DType::f32) {
    Tensor o = c.alloc(c.out_dtype(), x.sizes());
    copy_into(y, o);
    c.ctx.release(y.buffer);
    y = o;
  }
  set_out(c, y);
}

}  // namespace

void register_experts_ops(OpRegistry& r) {
  r.add("fuselm.experts.default", experts);
  r.add("fuselm.experts_shared.default", experts);
}

}  // namespace fuselm::runtime::ops
