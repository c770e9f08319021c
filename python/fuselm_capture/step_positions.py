"""Refuses graphs whose float data is computed from the step's token positions counted from 0.

Capture traces one call over the whole prompt with no cache, where `arange(T)` (T the call's token
count) equals the tokens' absolute positions. The engine runs the graph once per step over the new
tokens only (a KV cache, a chunked prefill), where arange(T) restarts at 0 each step: an index made
from it (a router's rows) is still right, but a value computed from it (a position-dependent
attention temperature, a sinusoidal embedding) would silently differ from the model's. The graph's
positions that the engine does supply are its position_ids / cache_position inputs.

Rule: from every arange that starts at 0 and whose length is symbolic (the token count), follow
the ops that compute values from their input's values (arithmetic, casts, views); the first such
op with a floating-point result is refused, naming it and its module. Indexing, comparisons and
reductions end the walk: they use positions as indices or masks, which the attention op owns.
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
    """The graph computes float data from the step's token positions counted from 0."""


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


def _packet_name(node: torch.fx.Node) -> str:
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


def check_step_positions(graph: torch.fx.Graph) -> None:
    """Raises StepPositionsRefused (one line: op, module) when float data derives from arange(T)."""
    from .decompose import module_of
    derived: set[torch.fx.Node] = set()
    for node in graph.nodes:  # topological order
        if _is_step_arange(node):
            derived.add(node)
            continue
        if node.op != "call_function" or _packet_name(node) not in _VALUE_OPS:
            continue
        if not any(a in derived for a in _operands(node)):
            continue
        if _is_float(node):
            raise StepPositionsRefused(
                f"op {_packet_name(node)} in module {module_of(node)} computes float data from the step's token "
                "positions counted from 0 (an arange of the token count, not the position inputs); under a KV "
                "cache or a chunked prefill they restart at 0 each step, so the model would run wrong")
        derived.add(node)
