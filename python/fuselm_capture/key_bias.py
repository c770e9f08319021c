"""A mask tensor the model builds as a per-key bias under its mask: folded into the keys, or refused.

A model may hand attention a mask it built itself: Doge's dynamic mask is a per-key score bias
b[h, k] (from the key's value states), broadcast over the queries and filled with the dtype's
minimum where the causal mask hides a key (`bias.masked_fill(mask != 0, min)`), repeated over each
key head's query heads. Such a mask is the mask kind plus a bias that depends on the key alone, and
q·k·s + b = [q, 1/s]·[k, b]·s: appending 1/s to every query and b to its key's vector computes it
in plain attention over a key one wider, with the bias stored in the KV cache beside the key it
belongs to (written when the key's token is processed, as the key itself is).

After export, each attention call that received a mask tensor (masks.attention_tensor_mask ties it
to the call's op) must get it, read back through the ops that build it, as: an optional repeat of
key heads (unsqueeze at 2, expand, reshape: transformers' repeat_kv, the engine's grouping) of
masked_fill(expand(unsqueeze(b [B, Hb, Tk], 2)), ne(mask_tensor, 0), v) with v at most -1e30 and
the mask tensor (masks.mask_tensor, full slices of it) of a kind the op takes (causal, a sliding
window, chunks). Hb is the call's key heads (or 1, broadcast over them). Then the call takes the
mask kind and the widened q and k, and the mask tensor dies. Anything else is refused, naming the
module: fuselm's attention op takes a mask kind, not a mask tensor.
"""
from __future__ import annotations

import torch

from .decompose import module_of
from .fx_nodes import eliminate_dead_code, insert_call

aten = torch.ops.aten


class KeyBiasRefused(RuntimeError):
    """A mask tensor capture cannot read as a mask kind plus a per-key bias (names the module)."""


def _call(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _same(a, b) -> bool:
    import sympy
    ea = a.node.expr if isinstance(a, torch.SymInt) else sympy.Integer(a)
    eb = b.node.expr if isinstance(b, torch.SymInt) else sympy.Integer(b)
    return sympy.simplify(ea - eb) == 0


def _strip_full_slices(node):
    while _call(node, aten.slice.Tensor):
        src, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
        start = node.args[2] if len(node.args) > 2 else None
        end = node.args[3] if len(node.args) > 3 else None
        step = node.args[4] if len(node.args) > 4 else 1
        size = _val(src).shape[dim]
        end_val = _val(end) if isinstance(end, torch.fx.Node) else end
        to_end = end_val is None or (isinstance(end_val, int) and end_val >= 2**62) or _same(end_val, size)
        if start not in (None, 0) or step != 1 or not to_end:
            break
        node = src
    return node


def _repeated_heads(mask):
    """(the mask before transformers' repeat_kv, its repeat count); (mask, 1) when not repeated."""
    if not _call(mask, aten.reshape.default, aten.view.default):
        return mask, 1
    e = mask.args[0]
    if not _call(e, aten.expand.default) or not _call(e.args[0], aten.unsqueeze.default) or e.args[0].args[1] != 2:
        return mask, 1
    src = e.args[0].args[0]
    s, o = _val(src).shape, _val(mask).shape
    n = _val(e).shape[2]
    if len(s) != 4 or len(o) != 4 or not isinstance(n, int) or s[1] * n != o[1]:
        return mask, 1
    return src, n


def _kind(mask_node) -> tuple[str, int, int]:
    """(mask, window, chunk) of the op from a mask_tensor's kind."""
    text = mask_node.args[3]
    name, _, size = text.partition(" ")
    if name == "causal" and not size:
        return "causal", -1, -1
    if name in ("sliding", "chunked") and size.isdigit():
        return (name, int(size), -1) if name == "sliding" else (name, -1, int(size))
    raise KeyBiasRefused(f"its mask is {text}, which the attention op does not take")


def _read(mask, att):
    """(per-key bias node [B, Hb, Tk], Hb, (mask, window, chunk)) of the mask tensor `mask` handed to
    attention node att; KeyBiasRefused saying why not."""
    heads_q, heads_k = _val(att.args[0]).shape[1], _val(att.args[1]).shape[1]
    filled, repeat = _repeated_heads(mask)
    if not _call(filled, aten.masked_fill.Scalar):
        raise KeyBiasRefused("it is not a bias filled where the mask hides a key")
    base, cond, value = filled.args[:3]
    if not isinstance(value, (int, float)) or value > -1e30:
        raise KeyBiasRefused(f"it fills hidden keys with {value}, not the dtype's minimum")
    if not _call(cond, aten.ne.Scalar) or cond.args[1] != 0:
        raise KeyBiasRefused("its hidden keys are not where the model's mask is nonzero")
    src = _strip_full_slices(cond.args[0])
    if not _call(src, torch.ops.fuselm.mask_tensor.default):
        raise KeyBiasRefused("its hidden keys do not come from the model's mask")
    kind = _kind(src)
    if not _call(base, aten.expand.default) or not _call(base.args[0], aten.unsqueeze.default) \
            or base.args[0].args[1] != 2:
        raise KeyBiasRefused("its bias is not one value per key broadcast over the queries")
    bias = base.args[0].args[0]
    b = _val(bias).shape
    if len(b) != 3 or not _same(b[2], _val(att.args[1]).shape[2]):
        raise KeyBiasRefused(f"its bias {tuple(b)} is not [batch, heads, keys]")
    heads = b[1]
    if heads * repeat != heads_q or heads not in (1, heads_k):
        raise KeyBiasRefused(f"its bias has {heads} heads repeated {repeat}x, not one per key head "
                             f"({heads_k} key heads, {heads_q} query heads)")
    return bias, heads, kind


def _widen(graph, att, bias, heads) -> None:
    """att's q and k one wider: [q, 1/scaling] and [k, bias] (bias [B, Hb, Tk] as a last column)."""
    from torch._guards import detect_fake_mode
    q, k, scaling = att.args[0], att.args[1], att.args[4]
    kv = _val(k)
    mode = detect_fake_mode([_val(q), kv, _val(bias)])

    def add(target, args, kwargs=None):
        def fake(a):
            if isinstance(a, torch.fx.Node):
                return _val(a)
            return [fake(x) for x in a] if isinstance(a, list) else a
        with mode:
            val = target(*[fake(a) for a in args], **(kwargs or {}))
        node = insert_call(graph, att, target, tuple(args), att, val)
        node.kwargs = dict(kwargs or {})
        return node

    ones = add(aten.full_like.default, [add(aten.slice.Tensor, [q, 3, 0, 1]), 1.0 / scaling])
    col = add(aten.unsqueeze.default, [bias, -1])
    if heads != kv.shape[1]:  # one bias for every key head
        col = add(aten.expand.default, [col, [-1, kv.shape[1], -1, -1]])
    if _val(col).dtype != kv.dtype:
        col = add(aten._to_copy.default, [col], {"dtype": kv.dtype})
    q2 = add(aten.cat.default, [[q, ones], -1])
    k2 = add(aten.cat.default, [[k, col], -1])
    att.args = (q2, k2, *att.args[2:])
    with mode:
        att.meta["val"] = torch.ops.fuselm.attention(*[_val(a) if isinstance(a, torch.fx.Node) else a for a in att.args])


def fold_key_bias(ep) -> list[str]:
    """Folds every mask tensor an attention call received into the call (see the module doc);
    returns the folded calls' modules. Raises KeyBiasRefused naming the module otherwise."""
    marker = torch.ops.fuselm.attention_tensor_mask.default
    ties = [n for n in ep.graph.nodes if _call(n, marker)]
    folded = [module_of(t.args[0]) for t in ties]
    for tie in ties:
        att, mask = tie.args
        try:
            bias, heads, (kind, window, chunk) = _read(mask, att)
        except KeyBiasRefused as why:
            raise KeyBiasRefused(f"attention in module {module_of(att)} was given a mask tensor the model built "
                                 f"itself ({why}); fuselm's attention op takes a mask kind and not a mask tensor, "
                                 "so it refuses the model") from None
        _widen(ep.graph, att, bias, heads)
        args = list(att.args)
        args[5], args[8], args[9] = window, chunk, kind
        att.args = tuple(args)
        tie.replace_all_uses_with(att)
        ep.graph.erase_node(tie)
    if ties:
        eliminate_dead_code(ep.graph)
        ep.graph_module.recompile()
    return folded
