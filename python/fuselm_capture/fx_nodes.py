"""Editing an exported graph: a new call node carries the traced value (its fake tensor) and the
module metadata of the node it stands for, as export's own nodes do, so later passes and the IR
writer read its shape, dtype and module like any other's."""
from __future__ import annotations

import torch

_MODULE_META = ("nn_module_stack", "stack_trace", "source_fn_stack")


def insert_call(graph: torch.fx.Graph, before: torch.fx.Node, target, args: tuple, meta_from: torch.fx.Node,
                fake) -> torch.fx.Node:
    """A call_function node of target(*args) inserted before `before`, with meta_from's module
    metadata and `fake` (the value export would have traced) as its val."""
    with graph.inserting_before(before):
        n = graph.call_function(target, args)
    n.meta = {k: v for k, v in meta_from.meta.items() if k in _MODULE_META}
    n.meta["val"] = fake
    return n


def eliminate_dead_code(graph) -> None:
    """FX's dead-code elimination, where export's metadata checks of a value (`.to()` leaves an
    `_assert_tensor_metadata`) do not keep an otherwise dead value alive."""
    checks = {torch.ops.aten._assert_tensor_metadata.default}
    while True:
        graph.eliminate_dead_code()
        dead = [n for n in graph.nodes if n.op == "call_function" and n.target in checks and n.args
                and isinstance(n.args[0], torch.fx.Node) and all(u.target in checks for u in n.args[0].users)]
        if not dead:
            return
        for n in dead:
            graph.erase_node(n)
