#pragma once
// Fused experts of a mixture-of-experts block: each token goes through its top-k experts' MLPs and
// the results are summed with the router's weights.
//
//   x          fp32 [t, h] contiguous                       token batch
//   ids        int64 [t, k]                                  expert of each (token, slot); ids
//                                                             outside [0, e) are skipped (no expert)
//   weights    fp32 [t, k]                                   router weight of each (token, slot)
//   gate_up    [e, n_up, h] (nk) or [e, h, n_up] (kn)        n_up = 2·i with a gate, i without
//   down       [e, h, i]    (nk) or [e, i, h]    (kn)        dtype f32, bf16 or f16 (same for both)
//   gate_up_bias fp32 [e, n_up] or null; down_bias fp32 [e, h] or null
//   y          fp32 [t, h]: y[r] = Σ_slot weights[r, slot] · MLP_{ids[r, slot]}(x[r])
//
// (+ an optional shared expert on every token, see ExpertsArgs::shared_up.)
//
// MLP_e(v) = down_e · gate(gate_up_e · v + b) + b_down, where gate() is
//   act(g) · u                     (has_gate, halves concatenated [g | u] or interleaved g0 u0 g1 u1 …)
//   act(u)                         (no gate)
//   act(min(g, limit)) · clamp(u, -limit, limit)
//                                  (Gate::clamped_act_mul, DeepSeek-V4's and Hunyuan-V4's experts)
//   (clamp(u, -limit, limit) + 1) · g' · sigmoid(alpha · g'),  g' = clamp(g, max = limit)
//                                  (Gate::clamped_swiglu, gpt-oss)
//
// The batch is grouped by expert: every active expert runs its two GEMMs once over all of its
// tokens (kernels::linear, fp32 accumulation), so each expert's weights are read once per call.
// Threads take whole experts (largest first), except when few experts hold many rows each (> 32
// on average, fewer than 2 experts per thread): then experts run in turn with threaded GEMMs. Each (token, slot) result has its own row, summed per token
// in slot order at the end, so the result does not depend on the thread count.
#include <cstdint>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/linear.h"

namespace fuselm::kernels {

// relu2: relu(x)² (ReLU squared, Primer; transformers' "relu2").
enum class ExpertsAct : unsigned char { silu, gelu, gelu_tanh, relu, relu2 };
enum class ExpertsGate : unsigned char { act_mul, act_only, clamped_act_mul, clamped_swiglu };

struct ExpertsArgs {
  const float* x = nullptr;
  const int64_t* ids = nullptr;
  const float* weights = nullptr;
  int64_t t = 0, k = 0, h = 0, i = 0, e = 0;
  const void* gate_up = nullptr;
  const void* down = nullptr;
  DType w_dtype = DType::f32;
  WeightLayout layout = WeightLayout::nk;
  const float* gate_up_bias = nullptr;
  const float* down_bias = nullptr;
  ExpertsGate gate = ExpertsGate::act_mul;
  ExpertsAct act = ExpertsAct::silu;
  bool interleaved = false;  // gate and up halves alternate (g0 u0 g1 u1 …) instead of [g | u]
  float alpha = 0.0f, limit = 0.0f;
  // Optional shared expert, run on every token and added to y with weight sigmoid(x · scale)
  // (1 without a scale): down_s · (act(gate_s · x) ⊙ (up_s · x)), or down_s · act(up_s · x)
  // without gate_s. Weights [si, h], [si, h], [h, si], [1, h] (nk), of dtype shared_dtype.
  const void* shared_gate = nullptr;
  const void* shared_up = nullptr;  // null: no shared expert
  const void* shared_down = nullptr;
  const void* shared_scale = nullptr;
  DType shared_dtype = DType::f32;
  int64_t shared_i = 0;
  ExpertsAct shared_act = ExpertsAct::silu;
  float* y = nullptr;
};

/// Throws std::invalid_argument on null pointers or non-positive sizes.
void experts(const ExpertsArgs& a);

}  // namespace fuselm::kernels
