"""The opaque recurrent (stateful) ops capture puts in place of transformers' kernel dispatch
points (docs/recurrent.md). Each stands for one call of a mixer's kernel over the new tokens of
every sequence in the batch; the engine keeps each sequence's state (conv window, SSM or delta-rule
matrix) in its state slot, so the graph never sees a state, a cache or a token loop. The state
index is the op's own (the order of the calls in the graph), never a module's layer number.

Semantics are those of transformers' torch fallback of the dispatch name the op replaces, started
from the state after the sequence's earlier tokens (zeros at its start). Never executed in Python;
capture only needs their fake (shape) functions.
"""
from __future__ import annotations

import torch


@torch.library.custom_op("fuselm::causal_conv1d", mutates_args=())
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str,
                  state_idx: int) -> torch.Tensor:
    """x [1, C, T], weight [C, K], bias [C] or None -> [1, C, T]: the causal depthwise convolution
    out[c, t] = act(bias[c] + sum_j weight[c, j] * x[c, t - (K-1) + j]), where positions before
    the sequence's first new token come from its state (the last K-1 inputs, zeros at its start).
    activation: "none" | "silu". Replaces causal_conv1d_fn / causal_conv1d_update. State: C*(K-1)."""
    raise RuntimeError("fuselm::causal_conv1d runs only in the fuselm engine")


@causal_conv1d.register_fake
def _causal_conv1d_fake(x, weight, bias, activation, state_idx):
    return torch.empty_like(x)


@torch.library.custom_op("fuselm::ssd_scan", mutates_args=())
def ssd_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
             D: torch.Tensor | None, dt_bias: torch.Tensor | None, dt_softplus: bool, dt_min: float,
             dt_max: float, state_idx: int) -> torch.Tensor:
    """Mamba2's state-space scan (SSD). x [1, T, H, P], dt [1, T, H], A [H], B and C [1, T, G, N]
    (head h reads group h // (H/G)), D [H] or None, dt_bias [H] or None -> y [1, T, H, P]:
    dt' = clamp(softplus?(dt + dt_bias), dt_min, dt_max); S[h] <- exp(dt'·A[h])·S[h] + dt'·x ⊗ B;
    y = S[h]·C + D[h]·x. Replaces mamba_chunk_scan_combined (transformers' torch fallback
    mamba2_chunk_scan) and selective_state_update. State: H*P*N."""
    raise RuntimeError("fuselm::ssd_scan runs only in the fuselm engine")


@ssd_scan.register_fake
def _ssd_scan_fake(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state_idx):
    return torch.empty_like(x)


@torch.library.custom_op("fuselm::selective_scan", mutates_args=())
def selective_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor | None, z: torch.Tensor | None, dt_bias: torch.Tensor | None,
                   dt_softplus: bool, state_idx: int) -> torch.Tensor:
    """Mamba(1)'s selective scan. x and dt [1, Dm, T], A [Dm, N], B and C [1, N, T] (or
    [1, G, N, T]), D [Dm] or None, z [1, Dm, T] or None, dt_bias [Dm] or None -> [1, Dm, T]:
    dt' = softplus?(dt + dt_bias); S[d] <- exp(dt'·A[d])·S[d] + dt'·x[d]·B; y = S[d]·C + D·x,
    times silu(z) when given. Replaces selective_scan_fn (and selective_state_update's Mamba(1)
    form). State: Dm*N."""
    raise RuntimeError("fuselm::selective_scan runs only in the fuselm engine")


@selective_scan.register_fake
def _selective_scan_fake(x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_idx):
    return torch.empty_like(x)


@torch.library.custom_op("fuselm::gated_delta_rule", mutates_args=())
def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     use_qk_l2norm: bool, state_idx: int) -> torch.Tensor:
    """The gated delta rule (Gated DeltaNet). q and k [1, T, Hk, Dk], v [1, T, Hv, Dv] (Hk divides
    Hv), g [1, T, Hv] (log decay per head) or [1, T, Hv, Dk] (per key channel: Kimi delta
    attention), beta [1, T, Hv] -> [1, T, Hv, Dv]: q, k l2-normalised when use_qk_l2norm, q scaled
    by Dk^-0.5; S <- exp(g)·S; S <- S + k ⊗ beta·(v - kᵀS); o = qᵀS. Replaces
    chunk_gated_delta_rule / fused_recurrent_gated_delta_rule and chunk_kda / fused_recurrent_kda.
    State: Hv*Dk*Dv."""
    raise RuntimeError("fuselm::gated_delta_rule runs only in the fuselm engine")


@gated_delta_rule.register_fake
def _gated_delta_rule_fake(q, k, v, g, beta, use_qk_l2norm, state_idx):
    return v.new_empty(v.shape)


@torch.library.custom_op("fuselm::decay_softmax_scan", mutates_args=())
def decay_softmax_scan(k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, u: torch.Tensor,
                       state_idx: int) -> torch.Tensor:
    """A per-channel softmax over the past with a linear decay in distance (the WKV recurrence).
    k, v [1, T, C], w, u [C] -> [1, T, C]: for each channel c,
    out[t] = sum_{s<=t} e^{l(t,s)}·v[s] / sum_{s<=t} e^{l(t,s)} with l(t,s) = k[s] + (t-1-s)·w[c]
    for s < t and l(t,t) = k[t] + u[c] (w: log decay per token, u: the current token's bonus).
    Found by probes where a recurrence is written inline (recurrence_by_hand.py). State: 3*C
    (num, den and their running exponent, transformers' rwkv_linear_attention_cpu form)."""
    raise RuntimeError("fuselm::decay_softmax_scan runs only in the fuselm engine")


@decay_softmax_scan.register_fake
def _decay_softmax_scan_fake(k, v, w, u, state_idx):
    return k.new_empty(k.shape)  # contiguous, as the engine's output


@torch.library.custom_op("fuselm::linear_scan", mutates_args=())
def linear_scan(a: torch.Tensor, b: torch.Tensor, state_idx: int) -> torch.Tensor:
    """A diagonal (elementwise) linear recurrence over the tokens, RG-LRU's form. a, b [1, T, C] ->
    [1, T, C]: h[t] = a[t] * h[t-1] + b[t] per channel, out[t] = h[t], h[-1] = 0 for a new
    sequence (the state carried across a sequence's steps otherwise). Found by probes where a
    recurrence is written inline (recurrence_by_hand.py). State: C (h after the last token)."""
    raise RuntimeError("fuselm::linear_scan runs only in the fuselm engine")


@linear_scan.register_fake
def _linear_scan_fake(a, b, state_idx):
    return b.new_empty(b.shape)
