"""Sparse attention whose top-k key selection spans the whole context: proved dense, or refused.

DeepSeek Sparse Attention (DSA) and the families built on it run a small indexer beside each
attention layer: it scores every key for every query and hands the attention call the positions
of the top-k (transformers passes them as `indices`, for kernels that take them; its eager path
folds them into the mask). Over a context of at most k keys the top-k is every key, so the call
is plain attention under its own mask, and the indexer (its projections, its scores, the mask it
read as a tensor) computes nothing the output depends on.

After export, each fuselm.attention op that carries a `key_select` must get it, through casts
only, from the indices of an `aten.topk` along the last axis of scores over the call's keys whose
k is the number of those keys (torch.export resolves transformers' `min(index_topk, kv_length)`
to kv_length when the token range lies under index_topk). Then key_select is dropped and the
indexer dies with it. Anything else (a narrower top-k, indices computed another way, a mask
tensor that stays live: a model computing with its mask) is refused, naming the module, since
fuselm's attention op cannot express it.

The context bound that makes this hold is decided over the export's token range: k traces as
`Min(index_topk, s)`, equal to s up to index_topk, so prove_dense returns index_topk and capture
records it as the model's context when it is below the config's (range_guards.holds_up_to).
"""
from __future__ import annotations

import operator

import sympy
import torch

from . import masks  # noqa: F401 - registers fuselm::mask_tensor, which prove_dense looks for
from .decompose import module_of
from .fx_nodes import eliminate_dead_code

# Ops that carry the indices unchanged but for their dtype (transformers casts them to int32).
_CASTS = frozenset({"to", "_to_copy", "alias", "clone", "contiguous", "detach", "lift_fresh_copy"})


class KeySelectionRefused(RuntimeError):
    """A key selection (or a mask read as a tensor) capture cannot prove to be every key."""


def _expr(value):
    if isinstance(value, torch.SymInt):
        return value.node.expr
    if isinstance(value, int):
        return sympy.Integer(value)
    return None


def _same_size(a, b) -> bool:
    ea, eb = _expr(a), _expr(b)
    return ea is not None and eb is not None and sympy.simplify(ea - eb) == 0


def _topk_source(sel):
    """The aten.topk node whose indices `sel` is (through casts), else None."""
    from .step_positions import packet_name
    node = sel
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and packet_name(node) in _CASTS:
        node = node.args[0]
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is operator.getitem
            and node.args[1] == 1):
        return None
    topk = node.args[0]
    if isinstance(topk, torch.fx.Node) and topk.op == "call_function" and packet_name(topk) == "topk":
        return topk
    return None


def _shape_env(*values):
    for v in values:
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
    return None


def _every_key_up_to(kval, keys) -> int | None:
    """The largest key count up to which a top-k keeping kval keys keeps all `keys` keys (None: at
    none). A plain int k keeps every key up to k; transformers' min(index_topk, kv_length) traces
    as Min(index_topk, s), equal to s up to index_topk, which the symbol's range decides."""
    from .range_guards import holds_up_to
    ek, ekeys = _expr(kval), _expr(keys)
    if ek is None or ekeys is None:
        return None
    if sympy.simplify(ek - ekeys) == 0:
        return 1 << 62  # k is the key count itself: every key at every length
    env = _shape_env(kval, keys)
    if env is None or not ekeys.free_symbols:
        return None
    return holds_up_to(sympy.Eq(ek, ekeys), env.var_to_range)


def _why_not_every_key(attn, sel) -> tuple[str | None, int]:
    """(None, bound) when `sel` is the top-k indices over all of attention node attn's keys for
    every key count up to bound, else (why not, 0)."""
    topk = _topk_source(sel)
    if topk is None:
        return "its key selection is not the indices of a top-k", 0
    scores, k = topk.args[0], topk.args[1]
    dim = topk.args[2] if len(topk.args) > 2 else topk.kwargs.get("dim", -1)
    sval = scores.meta.get("val")
    kval = k.meta.get("val") if isinstance(k, torch.fx.Node) else k
    keys = attn.args[1].meta.get("val")
    if not isinstance(sval, torch.Tensor) or not isinstance(keys, torch.Tensor):
        return "its top-k has no traced shapes", 0
    if dim not in (-1, sval.dim() - 1):
        return f"its top-k runs along axis {dim}, not the scores' last", 0
    if not _same_size(sval.shape[-1], keys.shape[-2]):
        return f"its top-k scores {sval.shape[-1]} positions, not the call's {keys.shape[-2]} keys", 0
    bound = _every_key_up_to(kval, sval.shape[-1])
    if bound is None:
        return f"its top-k keeps {kval} of {sval.shape[-1]} keys", 0
    return None, bound


def _key_select_at(node, at: int):
    return node.args[at] if len(node.args) > at else node.kwargs.get("key_select")


def _drop_key_select(node, at: int) -> None:
    if len(node.args) > at:
        node.args = (*node.args[:at], None, *node.args[at + 1:])
    else:
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "key_select"}


def _refuse_live_masks(graph) -> None:
    mask = torch.ops.fuselm.mask_tensor.default
    for node in graph.nodes:
        if node.op == "call_function" and node.target is mask:
            raise KeySelectionRefused(
                f"module {module_of(node)} reads its attention mask as a tensor (indexed) and computes with it, "
                "which fuselm's attention op, taking a mask kind and not a mask tensor, cannot express")


def prove_dense(ep) -> int | None:
    """Drops every fuselm.attention op's key_select proved to be every key, then the dead indexer.
    Returns the context (in tokens) up to which that holds for all of them, None when no op selects
    keys. Raises KeySelectionRefused naming the module otherwise, and when a mask tensor
    (masks.mask_tensor) is still read afterwards."""
    target = torch.ops.fuselm.attention.default
    at = [a.name for a in target._schema.arguments].index("key_select")
    bound = None
    for node in list(ep.graph.nodes):
        if node.op != "call_function" or node.target is not target or _key_select_at(node, at) is None:
            continue
        why, upto = _why_not_every_key(node, _key_select_at(node, at))
        if why is not None:
            raise KeySelectionRefused(f"attention in module {module_of(node)} attends to selected keys only ({why}); "
                                      "fuselm runs attention over every key, so it refuses the model")
        bound = upto if bound is None else min(bound, upto)
        _drop_key_select(node, at)
    if bound is None and not any(n.op == "call_function" and n.target is torch.ops.fuselm.mask_tensor.default
                                 for n in ep.graph.nodes):
        return None  # nothing to prove: the graph stays as exported
    eliminate_dead_code(ep.graph)
    ep.graph_module.recompile()
    _refuse_live_masks(ep.graph)
    return bound
