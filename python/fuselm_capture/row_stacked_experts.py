"""Experts held as 2-D matrices with every expert's rows stacked end to end ([E·I, H] or [H, E·I]).

An experts module may keep each projection as one 2-D parameter holding all E experts one after
another (DBRX's `w1`, `v1`, `w2` of [E·I, H]) and slice it per expert inside a data-dependent loop
that torch.export cannot trace. The expert count E is nowhere in the shapes, and names are not
read, so it is found by behaviour.

What is proven, on an fp64 probe (a copy of the module with random weights of its own shapes, so
meta weights do not matter): the module's forward takes (hidden states, top-k index, top-k
weights) as ops._takes_routing checks; its parameters (its own or its children's) are two or three
2-D tensors, each [R, H] or [H, R] for one hidden width H and one R; and its output on random
tokens, each routed to experts 0 and 1 (valid for any E >= 2) with random weights, equals
sum_j w_j · down_e(act(gate_e x) ⊙ up_e x) for one E dividing R (expert e's slice the rows or
columns e·I .. (e+1)·I, I = R / E), one assignment of the tensors to gate, up and down, one product
orientation per tensor where I = H allows two, and one activation of activations.ACTIVATIONS.
A wrong E slices other rows, so on random weights only the module's own E matches. The module's
forward is then one fuselm::experts op over [E, 2I, H] and [E, H, I] views of those parameters
(their copies are computed from parameters alone: the engine makes them once, at load).
"""
from __future__ import annotations

import copy
import itertools

import torch

from .activations import ACTIVATIONS

# A probe holds the module's weights at their own shapes in fp64; past this many elements capture
# refuses rather than allocate gigabytes to prove a layer.
_PROBE_ELEMENTS = 1 << 26


class NotRowStackedExperts(RuntimeError):
    """Why a candidate module is not experts stacked by rows (the reason export's error quotes)."""


def _slicings(shape: tuple[int, int], r: int, h: int) -> list[str]:
    """How a [r, h] ("rows") or [h, r] ("cols") tensor holds the experts' slices."""
    out = []
    if shape == (r, h):
        out.append("rows")
    if shape == (h, r):
        out.append("cols")
    return out


def per_expert(p: torch.Tensor, slicing: str, e: int) -> torch.Tensor:
    """[E, a, b]: expert k's slice of p as stored ([I, H] of rows, [H, I] of columns)."""
    if slicing == "rows":
        return p.view(e, p.shape[0] // e, p.shape[1])
    return p.view(p.shape[0], e, p.shape[1] // e).permute(1, 0, 2)


def canonical(p: torch.Tensor, slicing: str, transpose: bool, e: int) -> torch.Tensor:
    """gate/up as [E, I, H] (y = x @ W_eᵀ) or down as [E, H, I] (y = h @ W_eᵀ)."""
    s = per_expert(p, slicing, e)
    return s.transpose(1, 2) if transpose else s


def _orientations(s: torch.Tensor, want: tuple[int, int]) -> list[bool]:
    """Whether to transpose slice s [E, a, b] to reach per-expert shape want (both when square)."""
    return [t for t in (False, True) if (tuple(s.shape[1:][::-1]) if t else tuple(s.shape[1:])) == want]


def _candidate_widths(params: list[torch.Tensor]) -> list[tuple[int, int]]:
    """(R, H) pairs every parameter fits as [R, H] or [H, R]."""
    out = []
    for h in dict.fromkeys(params[0].shape):
        r = params[0].shape[1] if params[0].shape[0] == h else params[0].shape[0]
        if all(_slicings(tuple(p.shape), r, h) for p in params):
            out.append((r, h))
    return out


def _randomized(module: torch.nn.Module, gen: torch.Generator) -> torch.nn.Module:
    probe = copy.deepcopy(module)
    for name, p in list(probe.named_parameters()):
        owner, _, leaf = name.rpartition(".")
        target = probe.get_submodule(owner) if owner else probe
        target._parameters[leaf] = torch.nn.Parameter(torch.randn(*p.shape, dtype=torch.float64, generator=gen) * 0.5)
    return probe


def _expected(x, ids, w, mats, act, has_gate):
    """sum_j w_j · down_e(act(gate_e x) ⊙ up_e x) with mats [E, I, H] gate/up and [E, H, I] down."""
    out = torch.zeros_like(x)
    down = mats[-1]
    for r in range(x.shape[0]):
        for j in range(ids.shape[1]):
            ex = int(ids[r, j])
            up = mats[1][ex] @ x[r] if has_gate else mats[0][ex] @ x[r]
            mid = act(mats[0][ex] @ x[r]) * up if has_gate else act(up)
            out[r] += w[r, j] * (down[ex] @ mid)
    return out


def _hypotheses(params, names, r, h):
    """Every (E, roles) the shapes allow: roles are (name, slicing, transpose) for gate, up, down
    (up, down without a gate)."""
    n = len(params)
    for e in (d for d in range(2, r + 1) if r % d == 0):
        i = r // e
        for order in itertools.permutations(range(n)):
            choices = []
            for pos, k in enumerate(order):
                want = (h, i) if pos == n - 1 else (i, h)
                opts = [(names[k], sl, t) for sl in _slicings(tuple(params[k].shape), r, h)
                        for t in _orientations(per_expert(params[k], sl, e), want)]
                choices.append(opts)
            for roles in itertools.product(*choices):
                yield e, roles


def looks_row_stacked(module: torch.nn.Module) -> bool:
    """Whether the module's parameters have the shapes prove_row_stacked takes (two or three 2-D
    tensors sharing a hidden and a stacked width): only then is a failed proof worth a reason."""
    params = [p for _, p in module.named_parameters()]
    return len(params) in (2, 3) and all(p.dim() == 2 for p in params) and bool(_candidate_widths(params))


def prove_row_stacked(module: torch.nn.Module) -> dict:
    """The experts form of a module (see the module doc), proven on an fp64 probe; raises
    NotRowStackedExperts saying why not."""
    named = list(module.named_parameters())
    shapes = ", ".join(str(tuple(p.shape)) for _, p in named) or "none"
    if len(named) not in (2, 3) or any(p.dim() != 2 for _, p in named):
        raise NotRowStackedExperts(f"its parameters ({shapes}) are not two or three 2-D tensors")
    if sum(p.numel() for _, p in named) > _PROBE_ELEMENTS:
        raise NotRowStackedExperts(f"its parameters ({shapes}) are too large to prove on a probe of their own "
                                   f"shapes (over {_PROBE_ELEMENTS} elements)")
    widths = _candidate_widths([p for _, p in named])
    if not widths:
        raise NotRowStackedExperts(f"its parameters ({shapes}) do not share a hidden width and a stacked width")
    gen = torch.Generator().manual_seed(0)
    probe = _randomized(module, gen)
    for r, h in widths:
        form = _match(module, probe, r, h, gen)
        if form is not None:
            return form
    raise NotRowStackedExperts(f"its output is not sum_k w_k * down(act(gate x) * up x) over experts stacked by "
                               f"rows or columns of its parameters ({shapes}) for any expert count dividing them "
                               f"and act in {', '.join(ACTIVATIONS)}")


def _match(module, probe, r: int, h: int, gen: torch.Generator) -> dict | None:
    """The form of probe's output at hidden width h over stacked width r (module doc), or None."""
    names = [n for n, _ in probe.named_parameters()]
    params = [p.detach() for _, p in probe.named_parameters()]
    has_gate = len(params) == 3
    t = 6
    ids = torch.tensor([[0, 1] if k % 2 else [1, 0] for k in range(t)])  # experts 0 and 1: any E >= 2
    w = torch.rand(t, 2, dtype=torch.float64, generator=gen) + 0.5
    x = torch.randn(1, t, h, dtype=torch.float64, generator=gen)
    try:
        with torch.no_grad():
            got = type(module).forward(probe, x, ids, w)
    except Exception:  # noqa: BLE001 - another width, or no experts module at all
        return None
    if not isinstance(got, torch.Tensor) or tuple(got.shape) not in (tuple(x.shape), (t, h)):
        return None
    flat = got.reshape(t, h)
    for e, roles in _hypotheses(params, names, r, h):
        mats = [canonical(params[names.index(nm)], sl, tr, e) for nm, sl, tr in roles]
        for act_name, act in ACTIVATIONS.items():
            if torch.allclose(flat, _expected(x[0], ids, w, mats, act, has_gate), rtol=1e-9, atol=1e-9):
                return {"experts": e, "hidden": h, "roles": roles, "activation": act_name,
                        "has_gate": has_gate, "same_shape": tuple(got.shape) == tuple(x.shape)}
    return None


def row_stacked_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """The forward capture gives a module proven by prove_row_stacked: one fuselm::experts op over
    [E, 2I, H] (gate and up concatenated) and [E, H, I] made from its parameters."""
    form = self._fuselm_row_stacked
    params = dict(self.named_parameters())
    e = form["experts"]
    mats = [canonical(params[nm], sl, tr, e) for nm, sl, tr in form["roles"]]
    gate_up = torch.cat(mats[:2], dim=1) if form["has_gate"] else mats[0]
    x = hidden_states.reshape(-1, form["hidden"])
    out = torch.ops.fuselm.experts(x, top_k_index, top_k_weights.to(x.dtype), gate_up.contiguous(),
                                   mats[-1].contiguous(), None, None, form["activation"], True, False,
                                   form["has_gate"], 0.0, 0.0)
    return out.reshape(hidden_states.shape) if form["same_shape"] else out
