"""The step's token positions counted from 0: substituted by the position inputs, or refused.

Capture traces one call over the whole prompt with no cache, where `arange(T)` (T the call's token
count) equals the tokens' absolute positions. The engine runs the graph once per step over the new
tokens only (a KV cache, a chunked prefill), where arange(T) restarts at 0 each step: an index made
from it (a router's rows) is still right, but a value computed from it (a position-dependent
attention temperature, a sinusoidal embedding) would silently differ from the model's. The graph's
positions that the engine does supply are its position_ids / cache_position inputs.

Rule: from every arange that starts at 0 and whose length is symbolic (the token count), follow
the ops that compute values from their input's values (arithmetic, casts, views); an op with a
floating-point result there reads the positions as values. Indexing, comparisons and reductions
end the walk: they use positions as indices or masks, which the attention op owns.

Such an arange is replaced by the graph's position input when
- the graph has one (position_ids [1, T] or cache_position [T]);
- the arange is used only as values (no index or comparison also reads it, which needs the
  call's own 0..T-1);
- none of its values also derive from the position input (which would count the offset twice).
Why that is the model's meaning: a transformers causal LM must give the same logits whether a
prompt comes in one call or token by token over its cache (its cache contract; the model then
adds `past_key_values.get_seq_length()`, 0 in the capture call, to the arange). So a value made
from arange(T) in the cacheless call is the absolute position. Otherwise it is refused, naming the
op and its module.
"""
from __future__ import annotations

import torch

# Ops whose result's values are computed from an operand's values (by op overload packet name).
_VALUE_OPS = frozenset({
    "add", "sub", "rsub", "mul", "div", "floor", "ceil", "floor_divide", "remainder", "fmod", "neg", "abs",
    "pow", "log", "log1p", "log2", "log10", "exp", "exp2", "expm1", "sqrt", "rsqrt", "reciprocal", "square",
    "sin", "cos", "tan", "tanh", "sigmoid", "atan", "clamp", "clamp_min", "clamp_max", "minimum", "maximum",
    "round", "trunc", "_to_copy", "to", "type_as", "convert_element_type", "view", "reshape", "_unsafe_view",
    "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "clone", "contiguous", "alias", "repeat",
    "flatten", "select", "slice", "cat", "stack", "outer", "matmul", "mm", "bmm", "einsum", "polar",
})


class StepPositionsRefused(RuntimeError):
    """The graph computes float data from the step's token positions counted from 0, and they
    cannot be replaced by the position input."""


def _is_step_arange(node: torch.fx.Node) -> bool:
    """arange(T) / arange(0, T[, 1]) with a symbolic end: positions counted from 0 per call."""
    name = getattr(node.target, "__name__", "")
    if node.op != "call_function" or not name.startswith("arange"):
        return False
    args = list(node.args)
    if name.startswith("arange.start"):
        start, end = args[0], args[1] if len(args) > 1 else None
        step = args[2] if len(args) > 2 else node.kwargs.get("step", 1)
        if not (isinstance(start, (int, float)) and start == 0 and step == 1):
            return False
    else:
        end = args[0] if args else None
    return isinstance(end, torch.fx.Node)


def packet_name(node: torch.fx.Node) -> str:
    """The op's overload packet name ("add" for aten.add.Tensor), else its target's name."""
    packet = getattr(node.target, "_overloadpacket", None)
    return getattr(packet, "__name__", "") or getattr(node.target, "__name__", "")


def _is_float(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def _operands(node: torch.fx.Node):
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, torch.fx.Node):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.fx.Node))


def _value_closure(root: torch.fx.Node):
    """(nodes computed by value ops from root with integer results, the first float results, the
    other consumers: indices, comparisons, reductions, outputs)."""
    ints, floats, others, stack = {root}, [], [], [root]
    while stack:
        for user in stack.pop().users:
            if user.op == "call_function" and packet_name(user).startswith("_assert"):
                continue  # export's metadata checks read nothing's values
            if user.op != "call_function" or packet_name(user) not in _VALUE_OPS:
                others.append(user)
            elif _is_float(user):
                floats.append(user)
            elif user not in ints:
                ints.add(user)
                stack.append(user)
    return ints, floats, others


def _derived_from(graph: torch.fx.Graph, source: torch.fx.Node | None) -> set[torch.fx.Node]:
    out = {source} if source is not None else set()
    for node in graph.nodes:  # topological order
        if node not in out and any(a in out for a in _operands(node)):
            out.add(node)
    return out


def _positions_as(graph: torch.fx.Graph, positions: torch.fx.Node, arange: torch.fx.Node) -> torch.fx.Node:
    """positions viewed as [T] with arange's dtype, inserted before arange."""
    aten = torch.ops.aten
    val, want = positions.meta["val"], arange.meta["val"]
    with graph.inserting_before(arange):
        flat = graph.call_function(aten.view.default, (positions, [-1]))
        flat.meta = {k: v for k, v in arange.meta.items() if k != "val"}
        flat.meta["val"] = val.view(-1)
        if val.dtype == want.dtype:
            return flat
        cast = graph.call_function(aten._to_copy.default, (flat,), {"dtype": want.dtype})
        cast.meta = {k: v for k, v in arange.meta.items() if k != "val"}
        cast.meta["val"] = flat.meta["val"].to(want.dtype)
        return cast


def substitute_step_positions(graph: torch.fx.Graph, positions: torch.fx.Node | None) -> list[str]:
    """Replaces each arange(T) read as values by the position input (the module docstring's rule).

    positions: the graph's position_ids [1, T] or cache_position [T] placeholder, or None.
    Returns one line per replaced arange (its first float consumer's op and module).
    Raises StepPositionsRefused (one line: op, module, why) where the rule does not hold.
    """
    from .decompose import module_of
    from_positions = _derived_from(graph, positions)
    done = []
    for root in [n for n in graph.nodes if _is_step_arange(n)]:
        ints, floats, others = _value_closure(root)
        if not floats:
            continue
        node = floats[0]
        why = ("the graph has no position input" if positions is None else
               f"{packet_name(others[0])} also reads it as an index or mask" if others else
               "its values also derive from the position input" if any(n in from_positions for n in ints | set(floats))
               else None)
        if why is not None:
            raise StepPositionsRefused(
                f"op {packet_name(node)} in module {module_of(node)} computes float data from the step's token "
                "positions counted from 0 (an arange of the token count, not the position inputs), and they "
                f"cannot be replaced by the position input: {why}; under a KV cache or a chunked prefill they "
                "restart at 0 each step, so the model would run wrong")
        root.replace_all_uses_with(_positions_as(graph, positions, root))
        graph.erase_node(root)
        done.append(f"op {packet_name(node)} in module {module_of(node)}")
    return done


def check_step_positions(graph: torch.fx.Graph) -> None:
    """Raises StepPositionsRefused (one line: op, module) when float data derives from arange(T)
    in a graph with no position input."""
    substitute_step_positions(graph, None)
