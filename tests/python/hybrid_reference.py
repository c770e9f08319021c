"""Plain PyTorch definitions of the fuselm ops a captured hybrid graph holds (attention, experts and
the recurrent ops), written from their schemas' docstrings (python/fuselm_capture/ops.py,
recurrent_ops.py) as token-by-token loops from a zero state, and an fx interpreter that runs a
captured graph with them. The graph run this way must compute what transformers computes: that
checks what capture put in the graph (which op, which arguments) without the engine.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def causal_conv1d(x, weight, bias, activation, state_idx):
    k = weight.shape[1]
    out = F.conv1d(F.pad(x, (k - 1, 0)), weight.unsqueeze(1), bias, groups=x.shape[1])
    assert activation in ("none", "silu"), activation
    return F.silu(out) if activation == "silu" else out


def ssd_scan(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state_idx):
    _, t, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    group = torch.arange(h) // (h // g)
    s = x.new_zeros(h, p, n)
    y = torch.empty_like(x)
    for i in range(t):
        d = dt[0, i] + (dt_bias if dt_bias is not None else 0)
        d = F.softplus(d) if dt_softplus else d
        d = d.clamp(dt_min, dt_max)
        s = torch.exp(d * A)[:, None, None] * s + d[:, None, None] * x[0, i, :, :, None] * B[0, i, group][:, None, :]
        y[0, i] = (s @ C[0, i, group][:, :, None])[..., 0] + (D[:, None] * x[0, i] if D is not None else 0)
    return y


def selective_scan(x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_idx):
    _, dm, t = x.shape
    s = x.new_zeros(dm, A.shape[1])
    y = torch.empty_like(x)
    for i in range(t):
        d = dt[0, :, i] + (dt_bias if dt_bias is not None else 0)
        d = F.softplus(d) if dt_softplus else d
        s = torch.exp(d[:, None] * A) * s + d[:, None] * x[0, :, i, None] * B[0, :, i][None, :]
        y[0, :, i] = s @ C[0, :, i] + (D * x[0, :, i] if D is not None else 0)
    return y * F.silu(z) if z is not None else y


def gated_delta_rule(q, k, v, g, beta, use_qk_l2norm, state_idx):
    _, t, hk, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q * dk ** -0.5
    rep = hv // hk
    q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    s = v.new_zeros(hv, dk, dv)
    out = torch.empty_like(v)
    for i in range(t):
        decay = torch.exp(g[0, i])
        s = s * (decay[:, None, None] if decay.dim() == 1 else decay[:, :, None])
        kv = torch.einsum("hk,hkv->hv", k[0, i], s)
        delta = (v[0, i] - kv) * beta[0, i][:, None]
        s = s + k[0, i][:, :, None] * delta[:, None, :]
        out[0, i] = torch.einsum("hk,hkv->hv", q[0, i], s)
    return out


def attention(q, k, v, sinks, scaling, sliding_window, softcap, layer_idx, chunk_size=-1, mask="causal",
              alibi_slopes=None):
    assert mask in ("causal", "sliding") and sinks is None and alibi_slopes is None and chunk_size == -1, mask
    hq, t, hkv = q.shape[1], q.shape[2], k.shape[1]
    k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scaling
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    hidden = torch.ones(t, t, dtype=torch.bool).triu(1)
    if mask == "sliding" and sliding_window > 0:  # key j kept from query i when j > i - W (the op's window)
        hidden |= torch.ones(t, t, dtype=torch.bool).tril(-sliding_window)
    scores = scores.masked_fill(hidden, -math.inf)
    return (scores.softmax(-1) @ v).transpose(1, 2).contiguous()  # the op returns a dense [1, T, Hq, Dv]


def experts(hidden, top_k_index, top_k_weights, gate_up, down, gate_up_bias, down_bias, activation,
            is_concatenated, is_transposed, has_gate, alpha, limit):
    from fuselm_capture.activations import ACTIVATIONS
    assert activation in ACTIVATIONS, activation
    act = ACTIVATIONS[activation]
    out = torch.zeros_like(hidden)
    for r in range(hidden.shape[0]):
        for j in range(top_k_index.shape[1]):
            e = int(top_k_index[r, j])
            gu = hidden[r] @ gate_up[e] if is_transposed else gate_up[e] @ hidden[r]
            if gate_up_bias is not None:
                gu = gu + gate_up_bias[e]
            if has_gate:
                n = gu.shape[0] // 2
                gate, up = (gu[:n], gu[n:]) if is_concatenated else (gu[::2], gu[1::2])
                h = act(gate) * up
            else:
                h = act(gu)
            y = h @ down[e] if is_transposed else down[e] @ h
            if down_bias is not None:
                y = y + down_bias[e]
            out[r] += top_k_weights[r, j] * y
    return out


def decay_softmax_scan(k, v, w, u, state_idx):
    """Each token's softmax over its past, from the docstring's l(t, s), in float64 (no running
    maximum: the logits are shifted by their row's largest)."""
    _, t, c = k.shape
    kd, vd, wd, ud = (x.double() for x in (k[0], v[0], w, u))
    out = torch.empty(1, t, c, dtype=torch.float64)
    for i in range(t):
        dist = (i - 1 - torch.arange(i + 1)).double()
        logit = kd[: i + 1] + dist[:, None] * wd[None]
        logit[i] = kd[i] + ud
        out[0, i] = (torch.softmax(logit, 0) * vd[: i + 1]).sum(0)
    return out.to(k.dtype)


def linear_scan(a, b, state_idx):
    """h[t] = a[t]·h[t-1] + b[t] from h = 0, out[t] = h[t], in float64 (the docstring's loop)."""
    h = torch.zeros(b.shape[2], dtype=torch.float64)
    out = torch.empty(b.shape, dtype=torch.float64)
    for i in range(b.shape[1]):
        h = a[0, i].double() * h + b[0, i].double()
        out[0, i] = h
    return out.to(b.dtype)


REFERENCE = {"causal_conv1d": causal_conv1d, "ssd_scan": ssd_scan, "selective_scan": selective_scan,
             "gated_delta_rule": gated_delta_rule, "decay_softmax_scan": decay_softmax_scan, "linear_scan": linear_scan,
             "attention": attention,
             "experts": experts}


class ReferenceInterpreter(torch.fx.Interpreter):
    """Runs a captured graph with every fuselm op computed by REFERENCE; counts the ops it ran."""

    def __init__(self, gm):
        super().__init__(gm)
        self.ran: dict[str, int] = {}

    def call_function(self, target, args, kwargs):
        from fuselm_capture.ir_writer import DROPPED_OPS
        name = str(target)
        if name in DROPPED_OPS:  # as the IR drops them (they check the meta device capture traced on)
            return None
        # The engine ignores devices; capture traced on the meta device.
        cpu = lambda a: torch.device("cpu") if isinstance(a, torch.device) else a  # noqa: E731
        args, kwargs = torch.utils._pytree.tree_map(cpu, (args, kwargs))
        if name.startswith("fuselm."):
            op = name.split(".")[1]
            self.ran[op] = self.ran.get(op, 0) + 1
            return REFERENCE[op](*args, **kwargs)
        return super().call_function(target, args, kwargs)
