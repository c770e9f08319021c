"""The opaque fuselm ops that capture puts in the graph, and their transformers interface hooks.

fuselm::attention stands for a whole attention call: transformers hands it q, k, v after rope and
the module's own scale, window, softcap and sinks. It is registered in AttentionInterface and in
the mask interface (masks.py), whose builder returns the mask's kind instead of a tensor: the
engine owns causality, windows, chunks and sequence boundaries, and reads each layer's mask kind
from its op. fuselm::experts stands for a whole experts call (ExpertsInterface).
Neither op is ever executed in Python; capture only needs their fake (shape) functions.
"""
from __future__ import annotations

import inspect
import math
import types

import torch

from .activations import ACTIVATIONS
from .expert_lists import identify_listed_experts
from .row_stacked_experts import (NotRowStackedExperts, looks_row_stacked, prove_row_stacked,
                                  row_stacked_experts_forward)

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
    chunk_size: int = -1,
    mask: str = "causal",
    alibi_slopes: list[float] | None = None,
    key_select: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [B,Hq,S,Dqk], k [B,Hkv,S,Dqk], v [B,Hkv,S,Dv] -> [B,S,Hq,Dv]. Runs only in the engine.

    mask: causal | sliding | chunked (with sliding_window / chunk_size) or a kind the engine
    refuses (bidirectional, unknown), with the reason after a colon (masks.MaskKind).
    alibi_slopes: Hq slopes of an ALiBi bias slope[h] · (key - query position) added to the
    scaled (and capped) scores, or None.
    key_select: [B, S, k] key positions each query may attend to (sparse attention's `indices`), or
    None. Only capture sees it: key_selection.py proves the selection is every key and removes it,
    or refuses the model."""
    raise RuntimeError("fuselm::attention runs only in the fuselm engine")


@attention.register_fake
def _attention_fake(q, k, v, sinks, scaling, sliding_window, softcap, layer_idx, chunk_size=-1, mask="causal",
                    alibi_slopes=None, key_select=None):
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
    alpha: float,
    limit: float,
) -> torch.Tensor:
    """hidden [T,H], top_k_index/weights [T,k], gate_up [E,2I,H] (or transposed) -> [T,H].

    activation: silu | gelu | gelu_tanh | relu | relu2 (act(gate) * up, or act(up) without a gate; with
    limit > 0, act(clamp(gate, max=limit)) * clamp(up, -limit, limit)), or
    clamped_swiglu: (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = clamp(gate, max=limit).
    """
    raise RuntimeError("fuselm::experts runs only in the fuselm engine")


@experts.register_fake
def _experts_fake(hidden, *args):
    return torch.empty_like(hidden)


class ExpertsCaptureError(RuntimeError):
    """An experts module whose activation or gating function fuselm does not recognize."""


def _identify_activation(fn) -> str:
    """The name of the elementwise function `fn` computes, found by evaluating it on a probe."""
    x = torch.linspace(-8.0, 8.0, 257, dtype=torch.float64)
    y = fn(x)
    for name, ref in ACTIVATIONS.items():
        if torch.allclose(y, ref(x), rtol=1e-9, atol=1e-9):
            return name
    raise ExpertsCaptureError(f"activation {type(fn).__name__} is none of {', '.join(ACTIVATIONS)}")


def _clamped_swiglu(gate_up, alpha, limit, concatenated):
    n = gate_up.shape[-1] // 2
    gate, up = (gate_up[..., :n], gate_up[..., n:]) if concatenated else (gate_up[..., ::2], gate_up[..., 1::2])
    g = gate.clamp(max=limit)
    return (up.clamp(-limit, limit) + 1) * g * torch.sigmoid(alpha * g)


def _identify_gate(module) -> tuple[str, bool, float, float]:
    """(activation, is_concatenated, alpha, limit) of an experts module's gating function.

    transformers' default gate is act(gate) * up over the two concatenated halves (whatever the
    module's is_concatenated flag says). A module's own gate must compute the clamped SwiGLU form
    (gpt-oss) over concatenated or interleaved halves; its alpha and limit are read back from
    probes of the function and the whole form is then checked on random inputs, so any other
    function is an error.
    """
    from transformers.integrations import moe
    if not bool(getattr(module, "has_gate", True)):
        return _identify_activation(module.act_fn), True, 0.0, 0.0
    if getattr(type(module), "_apply_gate", moe._default_apply_gate) is moe._default_apply_gate:
        return _identify_activation(module.act_fn), True, 0.0, 0.0
    f64 = torch.float64
    probe = torch.randn(3, 64, dtype=f64, generator=torch.Generator().manual_seed(0)) * 4
    with torch.no_grad():
        for concatenated in (True, False):
            def gate_of(g, u):  # one row holding gate values g and up values u in this layout
                row = torch.cat([g, u]) if concatenated else torch.stack([g, u], dim=-1).reshape(-1)
                return module._apply_gate(row.unsqueeze(0))[0]
            zero = torch.zeros(4, dtype=f64)
            s = float(gate_of(torch.ones(4, dtype=f64), zero)[0])  # sigmoid(alpha) when limit > 1
            big = float(gate_of(torch.full((4,), 1e6, dtype=f64), zero)[0])  # limit * sigmoid(alpha * limit)
            if not (0.0 < s < 1.0 and big > 0):
                continue
            alpha = float(torch.logit(torch.tensor(s, dtype=f64)))
            limit = big
            for _ in range(100):
                limit = big / float(torch.sigmoid(torch.tensor(alpha * limit, dtype=f64)))
            if torch.allclose(module._apply_gate(probe), _clamped_swiglu(probe, alpha, limit, concatenated),
                              rtol=1e-6, atol=1e-6):
                return "clamped_swiglu", concatenated, alpha, limit
    found = _clamped_act_mul(module._apply_gate)
    if found is not None:
        return found
    raise ExpertsCaptureError(f"the gating function of experts module {type(module).__name__} is neither "
                              "act(gate) * up, act(clamp(gate, max=L)) * clamp(up, -L, L) nor the clamped SwiGLU form")


def _clamped_act_mul(apply_gate) -> tuple[str, bool, float, float] | None:
    """(act, is_concatenated, 0.0, L) when apply_gate computes act(clamp(gate, max=L)) * clamp(up, -L, L)
    (DeepSeek-V4's and Hunyuan-V4's experts) over concatenated or interleaved halves, else None.
    L is read back from two probes (an up value far past the clamp over one inside it, at a gate of
    1), act is the ACTIVATIONS entry that reproduces the function, and the whole form is then
    checked on random rows that cross both clamps."""
    f64 = torch.float64
    with torch.no_grad():
        for concatenated in (True, False):
            def gate_of(g, u):  # rows holding gate values g and up values u in this layout
                row = torch.cat([g, u], -1) if concatenated else torch.stack([g, u], dim=-1).flatten(-2)
                return apply_gate(row)

            one, tiny, huge = (torch.full((1, 4), v, dtype=f64) for v in (1.0, 1e-6, 1e12))
            inside = float(gate_of(one, tiny)[0, 0])
            if inside == 0.0:
                continue
            limit = float(gate_of(one, huge)[0, 0]) / inside * 1e-6
            if not (math.isfinite(limit) and 1e-5 < limit < 1e11):
                continue
            probe = torch.randn(3, 64, dtype=f64, generator=torch.Generator().manual_seed(1)) * (2 * limit + 4)
            for act, fn in ACTIVATIONS.items():
                def form(gu, fn=fn):
                    n = gu.shape[-1] // 2
                    g, u = (gu[..., :n], gu[..., n:]) if concatenated else (gu[..., ::2], gu[..., 1::2])
                    return fn(g.clamp(max=limit)) * u.clamp(-limit, limit)
                if torch.allclose(apply_gate(probe), form(probe), rtol=1e-6, atol=1e-9):
                    return act, concatenated, 0.0, limit
    return None


def _takes_routing(module) -> bool:
    """Whether module.forward takes exactly three required positional arguments (hidden states,
    top-k index, top-k weights: an experts call's signature, checked by behaviour afterwards)."""
    try:
        sig = inspect.signature(type(module).forward)
    except (TypeError, ValueError):
        return False
    params = list(sig.parameters.values())[1:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.default is inspect.Parameter.empty and p.kind not in
                (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    return len(required) == 3 and all(p.kind in positional for p in required)


def _stacked_pair(module) -> tuple[str, str] | str:
    """(gate_up, down) parameter names when all of the module's parameters are its own two 3-D
    tensors shaped [E, 2I, H] and [E, H, I]; else why not."""
    params = dict(module.named_parameters())
    shapes = ", ".join(f"{tuple(p.shape)}" for p in params.values()) or "none"
    if len(params) != 2 or any("." in n for n in params):
        return f"its parameters ({shapes}) are not two stacked tensors of its own"
    (na, a), (nb, b) = params.items()
    # gate_up may have more experts than down: the extra ones may be zero-compute (identity)
    # experts, which _prove_stacked_experts checks by behaviour.
    for (gn, g), (dn, d) in (((na, a), (nb, b)), ((nb, b), (na, a))):
        if (g.dim() == 3 and d.dim() == 3 and g.shape[0] >= d.shape[0] and g.shape[1] == 2 * d.shape[2]
                and g.shape[2] == d.shape[1]):
            return gn, dn
    return f"its parameters ({shapes}) are not a stacked pair [E, 2I, H] and [E, H, I]"


def _prove_stacked_experts(module, gate_up: str, down: str) -> str:
    """The activation of an experts module that transformers does not route through
    ExpertsInterface, proven by running the module's own forward on a probe: a copy holding small
    random stacked weights, random tokens and routing, whose output must equal
    sum_j w_j · down_e(act(gate_e x) ⊙ up_e x) (concatenated [gate; up] halves) for one act.
    When gate_up holds more experts than down (E_all > E), experts E.. are zero-compute: their term
    must be w_j · x. The probe then keeps the module's own expert counts (its forward may read
    them) and routes every token to both kinds. Raises ExpertsCaptureError saying why not."""
    import copy
    f64, gen = torch.float64, torch.Generator().manual_seed(0)
    e_all, e_dn = int(getattr(module, gate_up).shape[0]), int(getattr(module, down).shape[0])
    zero = e_all > e_dn
    e = e_all if zero else min(e_all, 4)
    e_routed = e_dn if zero else e
    t, k, i, h = 6, min(e, 2), 4, 8
    probe = copy.copy(module)
    gu = torch.randn(e, 2 * i, h, dtype=f64, generator=gen)
    dn = torch.randn(e_routed, h, i, dtype=f64, generator=gen)
    probe._parameters = {gate_up: torch.nn.Parameter(gu), down: torch.nn.Parameter(dn)}
    x = torch.randn(t, h, dtype=f64, generator=gen)
    if zero:  # one routed and one zero-compute expert per token (in either order)
        routed = torch.randint(0, e_routed, (t,), generator=gen)
        ident = torch.randint(e_routed, e, (t,), generator=gen)
        ids = torch.stack([routed, ident], 1)
        ids[::2] = ids[::2].flip(1)
    else:
        ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    w = torch.rand(t, k, dtype=f64, generator=gen) + 0.5
    try:
        with torch.no_grad():
            got = type(module).forward(probe, x, ids, w)
    except Exception as err:  # noqa: BLE001 - any failure means the rule does not cover it
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ExpertsCaptureError(f"its forward fails on a probe of {e} stacked experts: {first}") from err
    for name, act in ACTIVATIONS.items():
        want = torch.zeros_like(x)
        for r in range(t):
            for j in range(k):
                ex = int(ids[r, j])
                if ex >= e_routed:
                    want[r] += w[r, j] * x[r]
                    continue
                y = gu[ex] @ x[r]
                want[r] += w[r, j] * (dn[ex] @ (act(y[:i]) * y[i:]))
        if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, rtol=1e-9, atol=1e-9):
            return name
    kinds = "routed and zero-compute (identity) experts" if zero else "its stacked weights"
    raise ExpertsCaptureError(f"it does not compute sum_k w_k * down(act(gate x) * up x) over {kinds} "
                              f"for act in {', '.join(ACTIVATIONS)}")


def _stacked_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """The forward capture gives an experts module proven by _prove_stacked_experts. Zero-compute
    experts (indices past down's) add w · x in ATen ops; the fused op sees them with weight 0."""
    gate_up, down, activation = self._fuselm_stacked
    gu, dn = getattr(self, gate_up), getattr(self, down)
    e = dn.shape[0]
    if gu.shape[0] == e:
        return torch.ops.fuselm.experts(hidden_states, top_k_index, top_k_weights, gu, dn,
                                        None, None, activation, True, False, True, 0.0, 0.0)
    is_zero = top_k_index >= e
    ids = torch.where(is_zero, torch.zeros_like(top_k_index), top_k_index)
    weights = torch.where(is_zero, torch.zeros_like(top_k_weights), top_k_weights)
    routed = torch.ops.fuselm.experts(hidden_states, ids, weights, gu[:e], dn,
                                      None, None, activation, True, False, True, 0.0, 0.0)
    identity = (top_k_weights - weights).sum(dim=-1, keepdim=True).to(hidden_states.dtype)
    return routed + hidden_states * identity


def _identify_row_stacked(module) -> None:
    """Experts stacked by rows of 2-D parameters (row_stacked_experts.py), or the reason why not
    when the module's parameters have those shapes (a module of another kind, an attention module
    with three arguments, keeps its forward and no experts hint)."""
    if not looks_row_stacked(module):
        return
    try:
        module._fuselm_row_stacked = prove_row_stacked(module)
    except NotRowStackedExperts as err:
        module._fuselm_not_experts = str(err)
        return
    module.forward = types.MethodType(row_stacked_experts_forward, module)


def identify_experts(model: torch.nn.Module) -> None:
    """Records each experts module's gating function (_fuselm_gate) before export.

    Experts modules are the ones transformers' use_experts_implementation prepared (they carry its
    has_gate flag); probing runs here because inside torch.export every new tensor is fake.
    A module that transformers does not route through ExpertsInterface is an experts module by a
    structural rule: its forward takes three required arguments and its parameters are its own
    two 3-D tensors [E, 2I, H] and [E, H, I] (or two or three 2-D tensors holding the experts'
    rows end to end: row_stacked_experts.py). Its own forward is then checked on a probe
    (_prove_stacked_experts) and replaced by one fuselm::experts op. A candidate that fails the
    check, or has that signature and other 3-D parameters, is left as it is: it may be no experts
    module at all (and export as it is), and if it is one, its data-dependent loop stops export,
    whose error then carries the reason kept here (_fuselm_not_experts).
    """
    for module in model.modules():
        if hasattr(module, "has_gate") and hasattr(module, "is_concatenated"):
            module._fuselm_gate = _identify_gate(module)
            continue
        if not _takes_routing(module):
            continue
        if not any(p.dim() == 3 for p in module.parameters()):
            _identify_row_stacked(module)
            continue
        pair = _stacked_pair(module)
        if isinstance(pair, str):
            module._fuselm_not_experts = pair
            continue
        try:
            activation = _prove_stacked_experts(module, *pair)
        except ExpertsCaptureError as err:
            module._fuselm_not_experts = str(err)
            continue
        module._fuselm_stacked = (pair[0], pair[1], activation)
        module.forward = types.MethodType(_stacked_experts_forward, module)
    # Experts as a list of per-expert MLP modules with data-dependent dispatch (expert_lists.py).
    identify_listed_experts(model)


def _none_or(value, default):
    return default if value is None else value


class MaskCaptureError(RuntimeError):
    """An attention call whose mask capture cannot describe (names the module and layer)."""


def _layer_mask(module, attention_mask, sliding_window) -> tuple[int, int, str]:
    """(sliding_window, chunk_size, mask) of one attention call, from the mask kind transformers'
    mask interface handed it (masks.py); with no mask, causal as sdpa's is_causal (the module's
    own flag) and the call's window. A window passed at the call must agree with the mask's."""
    from .masks import MaskKind
    call_window = int(sliding_window) if sliding_window is not None and int(sliding_window) > 0 else -1
    where = f"attention module {type(module).__name__} (layer {getattr(module, 'layer_idx', None)})"
    if isinstance(attention_mask, torch.Tensor):
        raise MaskCaptureError(f"{where} was given a mask tensor the model built itself; fuselm cannot tell "
                               "which positions it hides, so it refuses to run it without that mask")
    if attention_mask is None:
        if getattr(module, "is_causal", True) is False:
            return call_window, -1, "bidirectional: the module is not causal and gets no mask"
        return call_window, -1, "sliding" if call_window > 0 else "causal"
    m: MaskKind = attention_mask
    if m.kind == "sliding":
        if call_window not in (-1, m.size):
            raise MaskCaptureError(f"{where}: its mask is a sliding window of {m.size} but the call passes "
                                   f"sliding_window={call_window}")
        return m.size, -1, "sliding"
    if call_window > 0:
        raise MaskCaptureError(f"{where}: its mask is {m.describe()} but the call passes sliding_window={call_window}")
    if m.kind == "chunked":
        return -1, m.size, "chunked"
    if m.kind == "causal":
        return -1, -1, "causal"
    return -1, -1, m.describe()


_SAME_VALUES = frozenset({"to", "_to_copy", "alias", "clone", "contiguous", "detach", "lift_fresh_copy"})


def _same_values(node):
    """node, or the node it copies or views unchanged (a `.to(device)` of the same dtype and shape)."""
    from .step_positions import packet_name
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args and \
            isinstance(node.args[0], torch.fx.Node):
        packet = packet_name(node)
        src, val = node.args[0], node.meta.get("val")
        sval = src.meta.get("val")
        if packet not in _SAME_VALUES or not isinstance(val, torch.Tensor) or not isinstance(sval, torch.Tensor) or \
                val.dtype != sval.dtype or val.shape != sval.shape:
            break
        node = src
    return node


def number_attention_calls(ep) -> int:
    """Sets each fuselm.attention op's layer_idx to its order in the graph (0, 1, ...); returns how
    many KV layers there are. Each call is its own KV layer: a module that calls attention twice
    (differential attention: two value sets over one K) gets two, and one module shared by several
    layers (a shared transformer block, a recurrent stack run in cycles) gets one per call, which is
    what transformers' cache does too (the layer index is passed at the call there). The module's
    layer_idx attribute is not the KV layer: a hybrid's attention at layers 1 and 3 holds KV layers
    0 and 1. A call over the very same k and v values as an earlier call, under the same window,
    chunk and mask (KV sharing: Gemma 3n's and 4's last layers attend over an earlier layer's K/V),
    takes the earlier call's layer, its k and v read past unchanged copies (`.to(device)`), so the
    engine sees the same values and holds that cache once (fusers/kv_layers.cc)."""
    target = torch.ops.fuselm.attention.default
    names = [a.name for a in target._schema.arguments]

    def get(node, name):
        i = names.index(name)
        return node.args[i] if len(node.args) > i else node.kwargs.get(name, target._schema.arguments[i].default_value)

    def put(node, name, value):
        i = names.index(name)
        if len(node.args) > i:
            node.args = (*node.args[:i], value, *node.args[i + 1:])
        else:
            node.kwargs = {**node.kwargs, name: value}

    layers: dict[tuple, int] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not target:
            continue
        k, v = _same_values(get(node, "k")), _same_values(get(node, "v"))
        key = (k, v, get(node, "sliding_window"), get(node, "chunk_size"), get(node, "mask"))
        if key in layers:
            put(node, "k", k)
            put(node, "v", v)
        else:
            layers[key] = len(layers)
        put(node, "layer_idx", layers[key])
    return len(layers)


# Tensors an attention call may carry that the op rightly ignores: the positions (the engine has
# its own) and the packed-sequence offsets of flash-attention's varlen path (one sequence here).
_IGNORED_TENSOR_KWARGS = frozenset({"position_ids", "cache_position", "cu_seq_lens_q", "cu_seq_lens_k"})


def _refuse_unread_tensors(module, kwargs: dict) -> None:
    """MaskCaptureError when the call passes a tensor the op would drop (a learned or relative
    position bias added to the logits, as Inkling's `position_bias`): running without it would be
    silently wrong, so capture refuses here and tries the model's eager attention instead."""
    dropped = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in _IGNORED_TENSOR_KWARGS)
    if dropped:
        raise MaskCaptureError(
            f"attention module {type(module).__name__} (layer {getattr(module, 'layer_idx', None)}) passes "
            f"{', '.join(dropped)} to the attention call, a tensor fuselm's attention op does not take; it is not "
            "dropped silently")


def attention_forward(module, query, key, value, attention_mask, scaling=None, sliding_window=None,
                      softcap=None, s_aux=None, dropout=0.0, **kwargs):
    """AttentionInterface entry: the module's call becomes one fuselm::attention op.

    The scale is the one transformers passes at the call (OPT passes 1.0 after pre-scaling q);
    None means the callee default head_dim**-0.5, which transformers' sdpa applies too.
    attention_mask is the masks.MaskKind the mask interface returned for this layer's mask.
    """
    # Sparse attention's per-query key positions (transformers passes them as `indices` to kernels
    # that take them): carried to the op so that key_selection.py can prove them, never dropped.
    key_select = kwargs.pop("indices", None)
    _refuse_unread_tensors(module, kwargs)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    # The KV layer is the call's order in the graph, set after export (number_attention_calls).
    if isinstance(attention_mask, torch.Tensor):
        # A mask the model built (from the mask tensor masks.MaskKind gives): key_bias.py reads it
        # back to a mask kind and a per-key bias after export, or refuses the model.
        from .masks import attention_tensor_mask
        if sliding_window is not None and int(sliding_window) > 0:
            raise MaskCaptureError(f"attention module {type(module).__name__} (layer {getattr(module, 'layer_idx', None)}) "
                                   f"was given a mask tensor and sliding_window={sliding_window}")
        out = torch.ops.fuselm.attention(query, key, value, s_aux, float(scaling), -1,
                                         float(_none_or(softcap, 0.0)), -1, -1, "tensor", None,
                                         key_select if isinstance(key_select, torch.Tensor) else None)
        return attention_tensor_mask(out, attention_mask), None
    window, chunk, mask = _layer_mask(module, attention_mask, sliding_window)
    out = torch.ops.fuselm.attention(
        query, key, value, s_aux, float(scaling), window,
        float(_none_or(softcap, 0.0)), -1, chunk, mask, None,
        key_select if isinstance(key_select, torch.Tensor) else None)
    return out, None


def experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """ExpertsInterface entry: one fuselm::experts op over the module's stacked weights."""
    gate = getattr(self, "_fuselm_gate", None)
    if gate is None:  # probing needs real tensors, and inside torch.export every tensor is fake
        raise ExpertsCaptureError(f"experts module {type(self).__name__} was not identified before export "
                                  "(capture calls ops.identify_experts on the model first)")
    activation, concatenated, alpha, limit = gate
    has_gate = bool(getattr(self, "has_gate", True))
    has_bias = bool(getattr(self, "has_bias", False))
    gate_up = self.gate_up_proj if has_gate else self.up_proj
    gate_up_bias = (self.gate_up_proj_bias if has_gate else self.up_proj_bias) if has_bias else None
    return torch.ops.fuselm.experts(
        hidden_states, top_k_index, top_k_weights, gate_up, self.down_proj, gate_up_bias,
        self.down_proj_bias if has_bias else None, activation,
        concatenated, bool(getattr(self, "is_transposed", False)), has_gate,
        float(alpha), float(limit))


_registered = False


def register_interfaces() -> None:
    """Registers the fuselm attention, mask and experts functions in transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from .masks import mask_forward
    AttentionInterface.register(ATTENTION_NAME, attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, mask_forward)
    try:
        from transformers.integrations.moe import ExpertsInterface
        ExpertsInterface.register(ATTENTION_NAME, experts_forward)
    except ImportError:  # transformers without an experts interface: MoE models will not export
        pass
    _registered = True
