"""Ops the engine lacks, decomposed at capture into ops it has.

engine_ops.txt is the engine's op registry (OpRegistry::builtin(), kept equal to it by
tests/cpp/ops_doc_test.cc). After export, every call of an ATen op outside it is decomposed with
PyTorch's own tables (torch._decomp: the Core ATen decompositions, then the wider table) limited
to the missing ops, so the rest of the graph keeps its high-level ops (aten.linear, ...) that the
fusers read. Decompositions may produce other missing ops, so it repeats a few rounds. An op that
no table decomposes is refused here, naming it and the module it comes from, instead of at load.
"""
from __future__ import annotations

import functools
from functools import lru_cache
from pathlib import Path

import torch

ENGINE_OPS_FILE = Path(__file__).with_name("engine_ops.txt")
MAX_ROUNDS = 4


class UnsupportedOpError(RuntimeError):
    """An op of the graph that the engine lacks and no decomposition table covers."""


@lru_cache(maxsize=1)
def engine_ops() -> frozenset[str]:
    return frozenset(line.strip() for line in ENGINE_OPS_FILE.read_text().splitlines() if line.strip())


def module_of(node: torch.fx.Node) -> str:
    """'path (Class)' of the innermost module a graph node was traced in; '<root>' outside any."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<root>"
    path, cls = list(stack.values())[-1]
    cls_name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return f"{path or '<root>'} ({cls_name.rsplit('.', 1)[-1]})"


def missing_ops(ep: torch.export.ExportedProgram, ignored: set[str]) -> dict[str, torch.fx.Node]:
    """Op name -> its first node, for the graph's calls the engine lacks (names as the IR writes them)."""
    from .ir_writer import op_name
    have = engine_ops()
    out: dict[str, torch.fx.Node] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name not in have and name not in ignored and name not in out:
            out[name] = node
    return out


def _index_adjacent(x, indices):
    """x[..., i0, i1, ..., ...] (aten.index.Tensor) with integer index tensors on adjacent axes
    d..d+n-1 (broadcast together to shape S): one index_select over those axes merged, on the
    linear index sum_j i_j * stride_j (negative indices wrapped), reshaped to x's leading axes,
    S, x's trailing axes (numpy's placement for adjacent indices). Boolean or non-adjacent
    indices are left as they are (NotImplemented), so capture names the op."""
    used = [d for d, i in enumerate(indices) if i is not None]
    if not used or used != list(range(used[0], used[0] + len(used))):
        return NotImplemented
    if any(indices[d].dtype not in (torch.int64, torch.int32) for d in used):
        return NotImplemented
    d0, n = used[0], len(used)
    dims = [x.shape[d] for d in used]
    idx = [torch.where(indices[d] < 0, indices[d] + x.shape[d], indices[d]).to(torch.int64) for d in used]
    if n > 1:
        shape = torch.broadcast_shapes(*(i.shape for i in idx))
        idx = [i.expand(shape) for i in idx]
    linear = idx[0]
    for j in range(1, n):
        linear = linear * dims[j] + idx[j]
    lead, trail = list(x.shape[:d0]), list(x.shape[d0 + n:])
    merged = x.reshape(lead + [-1] + trail) if n > 1 else x
    picked = torch.index_select(merged, d0, linear.reshape(-1))
    return picked.reshape(lead + list(linear.shape) + trail)


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    """aten.rms_norm as torch defines it (half types computed in float32, eps defaulting to the
    computation type's machine epsilon): its CompositeImplicit kernel recurses forever when
    run_decompositions calls it, so the definition is written out here."""
    dims = tuple(range(-len(normalized_shape), 0))
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if eps is None:
        eps = torch.finfo(xf.dtype).eps
    y = (xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)).to(x.dtype)
    return y * weight if weight is not None else y


def _max_all(x):
    """aten.max.default (the largest element, 0-d) as amax over every axis."""
    return torch.amax(x, dim=list(range(x.dim()))) if x.dim() else x.clone()


def _min_all(x):
    """aten.min.default (the smallest element, 0-d) as -amax(-x) over every axis."""
    return -_max_all(-x)


def _concatenate(tensors, dim=0):
    """aten.concatenate (torch.concatenate, an alias of cat): its CompositeImplicit kernel recurses
    forever under run_decompositions, as aten.rms_norm's does."""
    return torch.cat(tensors, dim)


def _var(x, dim=None, *, correction=None, keepdim=False):
    """aten.var.correction (torch.var / torch.std) as the mean of squared deviations over dim, divided
    by N - correction (default 1, Bessel's): PyTorch's table reaches prims.var, which the engine lacks."""
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else [d % x.dim() for d in dim]
    n = 1
    for d in dims:
        n = n * x.shape[d]
    deviations = x - torch.mean(x, dims, keepdim=True)
    return torch.sum(deviations * deviations, dims, keepdim=keepdim) / (n - (1 if correction is None else correction))


def _var_dim(x, dim=None, unbiased=True, keepdim=False):
    return _var(x, dim, correction=1 if unbiased else 0, keepdim=keepdim)


def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """aten.slice_scatter (functionalization's form of an in-place write into a slice, as
    `t[1:] += u`) with step 1 as a cat of x's part before the slice, src, and x's part after it."""
    if step != 1:
        return NotImplemented
    size = x.shape[dim]
    start = 0 if start is None else (start + size if isinstance(start, int) and start < 0 else start)
    end = size if end is None else (end + size if isinstance(end, int) and end < 0 else end)
    if isinstance(end, int) and isinstance(size, int):
        end = min(end, size)
    return torch.cat([x.narrow(dim, 0, start), src.to(x.dtype), x.narrow(dim, end, size - end)], dim)


def _copy(x, src, non_blocking=False):
    """aten.copy (functional copy_): src broadcast to x's shape, in x's dtype."""
    return src.to(x.dtype).expand(x.shape).clone()


def _log1p(x):
    """aten.log1p by Kahan's rule: with u = 1 + x (rounded), log(u) * x / (u - 1), or x itself where
    u == 1. The rounding error of 1 + x cancels in the quotient, so small x keep their relative
    accuracy (a plain log(1 + x) loses it; PyTorch's tables only reach prims.log1p). x = +inf is
    its own result (the quotient would be inf / inf)."""
    u = x + 1.0
    d = u - 1.0
    own = torch.bitwise_or(d == 0, d == float("inf"))  # `|` traces to aten.__or__, which recurses
    return torch.where(own, x, torch.log(u) * (x / torch.where(own, torch.ones_like(d), d)))


def _scatter_src(x, dim, index, src):
    """aten.scatter.src (out = x; out[.., index[i], ..] = src[i] along dim) without a scatter of
    tensors: each output position along dim takes the last index entry that names it (CPU torch's
    serial order, so repeated indices agree too), found as an amax over a one-hot of the index,
    then gathered from src; positions no entry names keep x. Only for an index as wide as x on
    every other axis (a router's top-k): otherwise the op is left for capture to name."""
    dim = dim % x.dim()
    k, n = index.shape[dim], x.shape[dim]
    if any(index.shape[a] != x.shape[a] for a in range(x.dim()) if a != dim):
        return NotImplemented
    src = src.narrow(dim, 0, k) if src.shape[dim] != k else src
    if any(src.shape[a] != x.shape[a] for a in range(x.dim()) if a != dim):
        return NotImplemented

    def along(t, axis, size):  # a 1-D tensor placed on axis of a (x.dim() + 1)-D shape
        shape = [1] * (x.dim() + 1)
        shape[axis] = size
        return t.reshape(shape)
    hits = index.unsqueeze(dim + 1) == along(torch.arange(n, device=x.device), dim + 1, n)  # [.., k, n, ..]
    order = along(torch.arange(k, device=x.device), dim, k)
    last = torch.amax(torch.where(hits, order, torch.full_like(order, -1)), dim=dim)  # [.., n, ..]
    picked = torch.gather(src, dim, torch.clamp(last, min=0))
    return torch.where(last >= 0, picked.to(x.dtype), x)


# ATen ops no PyTorch table decomposes into ops the engine has: aten.index.Tensor, the whole-tensor
# max/min, scatter.src, slice_scatter and copy have no entry; log1p's reaches prims.log1p and var's
# prims.var; aten.rms_norm's and aten.concatenate's own definitions do not terminate under
# run_decompositions.
_OWN = {torch.ops.aten.index.Tensor: _index_adjacent, torch.ops.aten.rms_norm.default: _rms_norm,
        torch.ops.aten.max.default: _max_all, torch.ops.aten.min.default: _min_all,
        torch.ops.aten.concatenate.default: _concatenate, torch.ops.aten.log1p.default: _log1p,
        torch.ops.aten.scatter.src: _scatter_src, torch.ops.aten.var.correction: _var,
        torch.ops.aten.var.dim: _var_dim,
        torch.ops.aten.slice_scatter.default: _slice_scatter, torch.ops.aten.copy.default: _copy}


def _table(ops) -> dict:
    from torch._decomp import core_aten_decompositions, decomposition_table
    core = core_aten_decompositions()
    table = {}
    for op in ops:
        fn = _OWN.get(op) or core.get(op) or decomposition_table.get(op)
        if fn is None and isinstance(op, torch._ops.OpOverload):
            # CompositeImplicitAutograd ops decompose by their own C++ definition. Not op.decompose:
            # the table's entry becomes the op's Python kernel for that key, which op.decompose calls
            # first, so it would call itself (RecursionError: aten.multiply, aten.broadcast_tensors).
            key = torch._C.DispatchKey.CompositeImplicitAutograd
            try:
                fn = functools.partial(op._op_dk, key) if op.has_kernel_for_dispatch_key(key) else None
            except Exception:  # noqa: BLE001 - no such kernel
                fn = None
        if fn is not None:
            table[op] = fn
    return table


def _drop_inplace_detach(ep: torch.export.ExportedProgram) -> None:
    """aten.detach_ changes no value in inference (export leaves one on a torch.tensor(...) made
    inside forward): its uses read its argument, and what only it kept alive goes."""
    from .fx_nodes import eliminate_dead_code
    graph = ep.graph
    found = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.detach_.default]
    for node in found:
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
    if found:
        eliminate_dead_code(graph)
        ep.graph_module.recompile()


def decompose_missing(ep: torch.export.ExportedProgram, ignored: set[str]) -> torch.export.ExportedProgram:
    """ep with every op the engine lacks decomposed into ops it has; raises UnsupportedOpError
    naming the op and its module when one cannot be. ignored: op names the IR drops anyway."""
    _drop_inplace_detach(ep)
    for _ in range(MAX_ROUNDS):
        missing = missing_ops(ep, ignored)
        if not missing:
            return ep
        table = _table(node.target for node in missing.values())
        if not table:
            break
        ep = ep.run_decompositions(table)
    missing = missing_ops(ep, ignored)
    if missing:
        name, node = next(iter(missing.items()))
        rest = sorted(set(missing) - {name})
        others = f" (nor {', '.join(rest[:5])})" if rest else ""
        raise UnsupportedOpError(f"op {name} in module {module_of(node)} is not in the engine's op set and no "
                                 f"PyTorch decomposition table covers it{others}")
    return ep
