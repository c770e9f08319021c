"""Experts held as a list of per-expert MLP modules, dispatched by data-dependent code.

A mixture-of-experts block may keep its experts as an nn.ModuleList of small MLPs, each with its
own 2-D weights, and dispatch tokens to them with data-dependent code (a loop over the experts
that were hit, torch.where on a one-hot mask, index_add_, split sizes read with .item() or
.tolist()). torch.export cannot trace such code. This module recognises the block by behaviour
and gives it a forward in the engine's routed form: router logits, a top-k over its scores and one
fuselm::experts op over the per-expert weights stacked inside the graph.

What is proven, on an fp64 probe (a copy of the block on random weights, so meta weights do not
matter): each list member computes down(act(gate x) * up x) (or down(act(up x))) over its own
2-D weights for one activation of activations.ACTIVATIONS; the block's other parameters are one linear
router [E, H] (with or without a bias); and the block's output equals sum_j w_j * expert_{e_j}(x)
for (e, w) = top-k of softmax or sigmoid of the router logits, the weights renormalised or not,
for one k. Anything else is left as it is, with the reason kept in _fuselm_not_experts, so that
torch.export's failure on the dispatch names the module and says why it was not taken.
"""
from __future__ import annotations

import copy
import itertools
import types

import torch

from .activations import ACTIVATIONS

_SCORES = {"softmax": lambda z: torch.softmax(z, dim=-1), "sigmoid": torch.sigmoid}


class NotListedExperts(RuntimeError):
    """Why a candidate block is not a top-k weighted sum of per-expert MLPs."""


def _matrices(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return list(module.named_parameters())


def _is_candidate_list(child: torch.nn.Module) -> bool:
    """A ModuleList of >= 2 members whose parameters are all 2-D, two or three per member, and
    shaped alike: the shape of a list of per-expert MLPs (decoder-layer lists hold 1-D norms)."""
    if not isinstance(child, torch.nn.ModuleList) or len(child) < 2:
        return False
    shapes = [[tuple(p.shape) for _, p in _matrices(m)] for m in child]
    return (len(shapes[0]) in (2, 3) and all(len(s) == 2 for s in shapes[0])
            and all(s == shapes[0] for s in shapes))


def _randomize(module: torch.nn.Module, gen: torch.Generator) -> torch.nn.Module:
    """A float64 CPU copy of module with random weights (works for modules on the meta device)."""
    probe = copy.deepcopy(module)
    probe = probe.to_empty(device="cpu").to(torch.float64)
    with torch.no_grad():
        for p in probe.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64, generator=gen) * 0.5)
        for b in probe.buffers():
            if b.is_floating_point():
                b.zero_()
    return probe


def _expert_form(expert: torch.nn.Module, gen: torch.Generator) -> tuple[tuple[str, ...], str]:
    """((gate, up, down) or (up, down) parameter names, activation) that expert computes, proven on
    random inputs with its own (random probe) weights."""
    params = dict(_matrices(expert))
    h = None
    for p in params.values():  # the input width: a dimension every matrix has
        h = p.shape[1]
        break
    x = torch.randn(5, max(h, 1), dtype=torch.float64, generator=gen)
    try:
        with torch.no_grad():
            got = expert(x)
    except Exception as err:  # noqa: BLE001 - a member that cannot run on [T, H] is no MLP of the rule
        raise NotListedExperts(f"a list member ({type(expert).__name__}) fails on a [T, H] probe: "
                               f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from err
    for names in itertools.permutations(params):
        w = [params[n] for n in names]
        for act_name, act in ACTIVATIONS.items():
            try:
                if len(w) == 3:
                    want = (act(x @ w[0].T) * (x @ w[1].T)) @ w[2].T
                else:
                    want = act(x @ w[0].T) @ w[1].T
            except RuntimeError:  # shapes of this assignment do not chain
                continue
            if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(
                    got, want, rtol=1e-9, atol=1e-9):
                return names, act_name
    raise NotListedExperts(f"a list member ({type(expert).__name__}) is neither down(act(gate x) * up x) nor "
                           "down(act(up x)) over its own weights")


def _router_of(block: torch.nn.Module, list_name: str, n_experts: int, width: int) -> str:
    """The name of the block's only other child holding parameters: a linear map to E logits."""
    others = [(n, m) for n, m in block.named_children() if n != list_name and any(True for _ in m.parameters())]
    own = [n for n, _ in block.named_parameters(recurse=False)]
    if own or len(others) != 1:
        names = ", ".join(own + [n for n, _ in others]) or "none"
        raise NotListedExperts(f"besides its expert list it holds parameters in {names}, not one router")
    name, router = others[0]
    params = dict(router.named_parameters())
    weight = [p for p in params.values() if p.dim() == 2]
    if len(weight) != 1 or tuple(weight[0].shape) != (n_experts, width) or len(params) > 2:
        raise NotListedExperts(f"its child {name} is not a linear router [{n_experts}, {width}]")
    return name


def _router_linear(router: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    params = list(router.parameters())
    weight = next(p for p in params if p.dim() == 2)
    bias = next((p for p in params if p.dim() == 1), None)
    return weight, bias


def _first_output(out, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The output tensor shaped like the input, and its index in a tuple output (-1: the output)."""
    if isinstance(out, torch.Tensor):
        return out, -1
    if isinstance(out, (tuple, list)):
        for i, o in enumerate(out):
            if isinstance(o, torch.Tensor) and o.shape == like.shape:
                return o, i
    raise NotListedExperts("its output holds no tensor shaped like its input")


def _prove_block(block: torch.nn.Module, list_name: str) -> dict:
    """The routed form of a block (see the module doc), proven on an fp64 probe."""
    gen = torch.Generator().manual_seed(0)
    probe = _randomize(block, gen)
    experts = getattr(probe, list_name)
    n = len(experts)
    names, act = _expert_form(experts[0], gen)
    for e in experts:  # every member the same form (proven on its own random weights)
        if _expert_form(e, gen) != (names, act):
            raise NotListedExperts("its list members do not all compute the same form")
    width = dict(_matrices(experts[0]))[names[0]].shape[1]
    router_name = _router_of(probe, list_name, n, width)
    weight, bias = _router_linear(getattr(probe, router_name))
    t = 12
    x = torch.randn(1, t, width, dtype=torch.float64, generator=gen)
    try:
        with torch.no_grad():
            raw = probe(x)
    except Exception as err:  # noqa: BLE001
        raise NotListedExperts(f"its forward fails on a [1, T, H] probe: {str(err).splitlines()[0]}") from err
    got, index = _first_output(raw, x)
    flat = x.reshape(t, width)
    with torch.no_grad():
        logits = flat @ weight.T + (bias if bias is not None else 0)
        each = torch.stack([m(flat) for m in experts], 1)  # [T, E, H]
    for (score_name, score), k, renorm in itertools.product(_SCORES.items(), range(1, n + 1), (False, True)):
        w, idx = torch.topk(score(logits), k, dim=-1)
        if renorm:
            w = w / w.sum(-1, keepdim=True)
        want = (each.gather(1, idx[..., None].expand(t, k, width)) * w[..., None]).sum(1)
        # fp32 tolerance: blocks often compute their scores in float32 (hypotheses differ by O(1))
        if torch.allclose(got.reshape(t, width), want, rtol=1e-5, atol=1e-6):
            extra = None
            if index >= 0:  # a tuple output: every other member must be the router logits
                for i, o in enumerate(raw):
                    if i == index:
                        continue
                    if not (isinstance(o, torch.Tensor) and o.numel() == logits.numel()
                            and torch.allclose(o.reshape(logits.shape), logits, rtol=1e-5, atol=1e-6)):
                        raise NotListedExperts(f"its output {i} is not its router logits")
                extra = len(raw)
            return {"list": list_name, "router": router_name, "names": names, "activation": act,
                    "score": score_name, "k": k, "renorm": renorm, "index": index, "n_out": extra}
    raise NotListedExperts(f"its output is not sum_k w_k * expert_k(x) for the top-k of softmax or sigmoid of "
                           f"its router {router_name} (k in 1..{n}, renormalised or not)")


def _listed_experts_forward(self, hidden_states, *args, **kwargs):
    """The forward capture gives a block proven by _prove_block: the routed form in ATen ops and
    one fuselm::experts op over the per-expert weights stacked inside the graph."""
    form = self._fuselm_listed
    experts = getattr(self, form["list"])
    weight, bias = _router_linear(getattr(self, form["router"]))
    width = hidden_states.shape[-1]
    x = hidden_states.reshape(-1, width)
    logits = torch.nn.functional.linear(x, weight, bias)
    scores = _SCORES[form["score"]](logits.float())
    w, idx = torch.topk(scores, form["k"], dim=-1)
    if form["renorm"]:
        w = w / w.sum(-1, keepdim=True)
    names = form["names"]
    has_gate = len(names) == 3
    mats = [[dict(m.named_parameters())[n] for n in names] for m in experts]
    if has_gate:
        gate_up = torch.stack([torch.cat([g, u], 0) for g, u, _ in mats])
    else:
        gate_up = torch.stack([u for u, _ in mats])
    down = torch.stack([m[-1] for m in mats])
    out = torch.ops.fuselm.experts(x, idx, w.to(x.dtype), gate_up, down, None, None, form["activation"],
                                   True, False, has_gate, 0.0, 0.0).reshape(hidden_states.shape)
    if form["index"] < 0:
        return out
    return tuple(out if i == form["index"] else logits for i in range(form["n_out"]))


def identify_listed_experts(model: torch.nn.Module) -> None:
    """Gives every block proven by _prove_block the routed forward; a block whose child list has
    the shape of per-expert MLPs but fails the proof keeps its forward and the reason
    (_fuselm_not_experts), which capture's export error then quotes with the module's name."""
    for block in model.modules():
        if hasattr(block, "_fuselm_listed"):
            continue
        lists = [n for n, c in block.named_children() if _is_candidate_list(c)]
        if len(lists) != 1:
            continue
        try:
            block._fuselm_listed = _prove_block(block, lists[0])
        except NotListedExperts as err:
            block._fuselm_not_experts = f"its list {lists[0]} of per-expert modules: {err}"
            continue
        block.forward = types.MethodType(_listed_experts_forward, block)
