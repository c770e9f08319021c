"""The opaque fuselm ops that capture puts in the graph, and their transformers interface hooks.

fuselm::attention stands for a whole attention call: transformers hands it q, k, v after rope and
the module's own scale, window, softcap and sinks. It is registered in AttentionInterface only (not
in the mask interface), so transformers builds no mask: the engine owns causality, windows and
sequence boundaries. fuselm::experts stands for a whole experts call (ExpertsInterface).
Neither op is ever executed in Python; capture only needs their fake (shape) functions.
"""
from __future__ import annotations

import torch

ATTENTION_NAME = "fuselm"


@torch.library.custom_op("fuselm::attention", mutates_args=())
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor | None,
    scaling: float,
    sliding_window: int,
    softcap: float,
    layer_idx: int,
) -> torch.Tensor:
    """q [B,Hq,S,Dqk], k [B,Hkv,S,Dqk], v [B,Hkv,S,Dv] -> [B,S,Hq,Dv]. Runs only in the engine."""
    raise RuntimeError("fuselm::attention runs only in the fuselm engine")


@attention.register_fake
def _attention_fake(q, k, v, sinks, scaling, sliding_window, softcap, layer_idx):
    b, h, s, _ = q.shape
    return q.new_empty(b, s, h, v.shape[-1])


@torch.library.custom_op("fuselm::experts", mutates_args=())
def experts(
    hidden: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    activation: str,
    is_concatenated: bool,
    is_transposed: bool,
    has_gate: bool,
) -> torch.Tensor:
    """hidden [T,H], top_k_index/weights [T,k], gate_up [E,2I,H] (or transposed) -> [T,H]."""
    raise RuntimeError("fuselm::experts runs only in the fuselm engine")


@experts.register_fake
def _experts_fake(hidden, *args):
    return torch.empty_like(hidden)


def _none_or(value, default):
    return default if value is None else value


def attention_forward(module, query, key, value, attention_mask, scaling=None, sliding_window=None,
                      softcap=None, s_aux=None, dropout=0.0, **kwargs):
    """AttentionInterface entry: the module's call becomes one fuselm::attention op.

    The scale is the one transformers passes at the call (OPT passes 1.0 after pre-scaling q);
    None means the callee default head_dim**-0.5, which transformers' sdpa applies too.
    """
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    layer_idx = getattr(module, "layer_idx", None)
    if layer_idx is None:
        layer_idx = -1  # the engine's attention fuser reports modules without an index
    out = torch.ops.fuselm.attention(
        query, key, value, s_aux, float(scaling), int(_none_or(sliding_window, -1)),
        float(_none_or(softcap, 0.0)), int(layer_idx))
    return out, None


def experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """ExpertsInterface entry: one fuselm::experts op over the module's stacked weights."""
    act = getattr(self, "act_fn", None)
    act_name = type(act).__name__ if act is not None else "none"
    gate_up = getattr(self, "gate_up_proj", None)
    if gate_up is None:
        gate_up = getattr(self, "up_proj")
    return torch.ops.fuselm.experts(
        hidden_states, top_k_index, top_k_weights, gate_up, self.down_proj,
        getattr(self, "gate_up_proj_bias", None), getattr(self, "down_proj_bias", None), act_name,
        bool(getattr(self, "is_concatenated", True)), bool(getattr(self, "is_transposed", False)),
        bool(getattr(self, "has_gate", True)))


_registered = False


def register_interfaces() -> None:
    """Registers the fuselm attention and experts functions in transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION_NAME, attention_forward)
    try:
        from transformers.integrations.moe import ExpertsInterface
        ExpertsInterface.register(ATTENTION_NAME, experts_forward)
    except ImportError:  # transformers without an experts interface: MoE models will not export
        pass
    _registered = True
