"""Every op of the engine's registry against torch itself (issue 15: "the op tests cover every op
in the registry"), in the style of PyTorch's OpInfo tests.

Each case is a tiny nn.Module whose forward calls the op (torch.ops.aten.<op>, the engine's name
for it) on its inputs: odd sizes, broadcasting, non-contiguous views (a transpose or a strided
slice inside the forward), 0-d and empty tensors, the integer and bool dtypes the op takes, and
symbolic sizes (a dynamic dim captured at one size and run at another). It is captured through
the normal capture path (capture_module), run by build/fuselm_run_graph (ir::load + the generic
interpreter: no fusers, no weights) and compared with the module run eagerly in torch on the
same inputs: same dtype and shape, floats within a tolerance, integers and bools exactly.

The op list is read from the binary (fuselm_run_graph --list-ops = OpRegistry::builtin()), so a
new op without a case here fails test_every_registered_op_has_a_case.
"""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "build" / "fuselm_run_graph"
A = torch.ops.aten
F32, I64, BOOL = torch.float32, torch.int64, torch.bool


@dataclasses.dataclass
class Case:
    """fn(*inputs) -> tensor or tuple of tensors; dynamic: {input index: {dim: Dim}}; capture_with:
    other inputs to capture with (the run then checks the sizes are symbolic); shape_only: the
    values are unspecified (new_empty)."""
    fn: Callable
    inputs: list
    what: str = ""
    dynamic: dict | None = None
    capture_with: list | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    shape_only: bool = False
    patch: Callable | None = None  # edits the captured IR (JSON) before it runs


def _renamed(ir: dict, old: str, new: str) -> dict:
    """torch.export writes torch.sym_int(x) as math.trunc(x); the engine takes both names."""
    for n in ir["nodes"]:
        if n["op"] == old:
            n["op"] = new
    return ir


def _as_sym_numel(ir: dict) -> dict:
    """torch.export writes numel() of a tensor with symbolic dims as sym_size * size; the IR's
    aten.sym_numel node is what other graphs hold, so the product node becomes one."""
    nodes = {n["name"]: n for n in ir["nodes"]}
    for n in ir["nodes"]:
        if n["op"] == "operator.mul":
            size = next(nodes[a["ref"]] for a in n["args"] if isinstance(a, dict) and "ref" in a)
            n["op"], n["args"] = "aten.sym_numel.default", [size["args"][0]]
            ir["ops"]["aten.sym_numel.default"] = {"schema": "aten::sym_numel(Tensor self) -> SymInt", "args": ["self"]}
            return ir
    raise AssertionError("no product of sizes to turn into sym_numel")


def r(*shape, dtype=F32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    if dtype == BOOL:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(lo) - 3, int(hi) + 4, shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def pos(*shape, seed=0):
    return r(*shape, lo=0.1, hi=3.0, seed=seed)


def nz(*shape, seed=0):
    """Divisors: |x| in [0.5, 2], either sign."""
    x = r(*shape, lo=0.5, hi=2.0, seed=seed)
    sign = torch.where(r(*shape, dtype=BOOL, seed=seed + 1), 1.0, -1.0)
    return x * sign


def idx(n, *shape, seed=0):
    g = torch.Generator().manual_seed(seed + 11)
    return torch.randint(0, n, shape, generator=g)


def T(a):  # a non-contiguous view: the transpose of the last two dims
    return a.transpose(-1, -2)


def S(a):  # a non-contiguous view: every other element of the last dim
    return a[..., ::2]


# At least 4, so the sizes the cases compute from it (n // 2, n - 1, ...) are never 0 or 1, which
# torch.export would specialize on.
N = torch.export.Dim("n", min=4, max=64)


def unary(op, gen=r, int_too=False):
    cases = [Case(lambda a: op(a), [gen(3, 5)], "2-D odd sizes"),
             Case(lambda a: op(T(a)), [gen(4, 7)], "transposed view"),
             Case(lambda a: op(S(a)), [gen(2, 3, 9)], "strided view"),
             Case(lambda a: op(a), [gen()], "0-d"),
             Case(lambda a: op(a), [gen(0, 3)], "empty")]
    if int_too:
        cases.append(Case(lambda a: op(a), [r(4, 5, dtype=I64)], "i64"))
    return cases


def binary(op, gen_b=r, ints=False, bools=False):
    cases = [Case(lambda a, b: op(a, b), [r(3, 5), gen_b(3, 5)], "same shape"),
             Case(lambda a, b: op(a, b), [r(4, 1, 5), gen_b(3, 1)], "broadcast both"),
             Case(lambda a, b: op(T(a), b), [r(5, 3), gen_b(5)], "transposed, broadcast row"),
             Case(lambda a, b: op(a, b), [r(2, 3), gen_b()], "0-d operand"),
             Case(lambda a, b: op(a, b), [r(0, 3), gen_b(3)], "empty")]
    if ints:
        cases.append(Case(lambda a, b: op(a, b), [r(3, 4, dtype=I64), r(4, dtype=I64, lo=1, hi=5) + 1], "i64"))
        cases.append(Case(lambda a, b: op(a, b), [r(3, 4, dtype=I64), r(3, 4)], "i64 with f32 promotes"))
    if bools:
        cases.append(Case(lambda a, b: op(a, b), [r(3, 4, dtype=BOOL), r(3, 4, dtype=BOOL, seed=3)], "bool"))
    return cases


def compare(op):
    return binary(op, ints=True) + [Case(lambda a: op(a, a), [r(3, 4)], "equal operands")]


def scalar_op(op, value, ints=False):
    cases = [Case(lambda a: op(a, value), [r(3, 5)], f"scalar {value}"),
             Case(lambda a: op(T(a), value), [r(4, 3)], "transposed"),
             Case(lambda a: op(a, value), [r()], "0-d")]
    if ints:
        cases.append(Case(lambda a: op(a, 2), [r(3, 4, dtype=I64)], "i64 with an int"))
    return cases


def inplace(op, b_gen=r):
    def f(a, b):
        x = A.clone.default(a)
        op(x, b)
        return x
    return [Case(f, [r(3, 5), b_gen(3, 5)], "same shape"), Case(f, [r(3, 5), b_gen(5)], "broadcast")]


def _sym_arange(n_of):
    return Case(lambda a: A.arange.default(n_of(a.shape[0]), dtype=I64), [r(9, 3)], "symbolic size",
                dynamic={0: {0: N}}, capture_with=[r(6, 3)])


def _getitem_case():
    def f(a):
        parts = A.split.Tensor(a, 2, 1)
        return parts[1]
    return Case(f, [r(3, 5)], "getitem of a split")


CASES: dict[str, list[Case]] = {
    "aten._softmax.default": [Case(lambda a: A._softmax.default(a, 1, False), [r(3, 7)], "dim 1"),
                              Case(lambda a: A._softmax.default(T(a), -1, False), [r(5, 4)], "transposed")],
    "aten._to_copy.default": [Case(lambda a: A._to_copy.default(a, dtype=I64), [r(3, 4, lo=-9, hi=9)], "f32 to i64"),
                              Case(lambda a: A._to_copy.default(a, dtype=F32), [r(3, 4, dtype=I64)], "i64 to f32"),
                              Case(lambda a: A._to_copy.default(T(a), dtype=torch.bfloat16), [r(3, 4)], "to bf16"),
                              Case(lambda a: A._to_copy.default(a, dtype=BOOL), [r(3, 4, dtype=I64)], "to bool")],
    "aten._unsafe_view.default": [Case(lambda a: A._unsafe_view.default(a, [5, 3]), [r(3, 5)], "reshape")],
    "aten.abs.default": unary(A.abs.default, int_too=True),
    "aten.add.Scalar": scalar_op(A.add.Scalar, 2.5, ints=True),
    "aten.add.Tensor": binary(A.add.Tensor, ints=True, bools=False)
    + [Case(lambda a, b: A.add.Tensor(a, b, alpha=2), [r(3, 4), r(4)], "alpha 2")],
    "aten.add_.Tensor": inplace(A.add_.Tensor),
    "aten.addmm.default": [Case(lambda c, a, b: A.addmm.default(c, a, b), [r(5), r(3, 4), r(4, 5)], "bias row"),
                           Case(lambda c, a, b: A.addmm.default(c, a, T(b)), [r(3, 5), r(3, 4), r(5, 4)],
                                "transposed weight, full bias"),
                           Case(lambda c, a, b: A.addmm.default(c, a, b, beta=0.5, alpha=2.0), [r(5), r(3, 4), r(4, 5)],
                                "beta, alpha", rtol=1e-4, atol=1e-5)],
    "aten.alias.default": [Case(lambda a: A.alias.default(a), [r(3, 4)])],
    "aten.amax.default": [Case(lambda a: A.amax.default(a, [1], True), [r(3, 5)], "keepdim"),
                          Case(lambda a: A.amax.default(T(a), [0, 1]), [r(3, 5)], "all dims, transposed"),
                          Case(lambda a: A.amax.default(a, [-1]), [r(2, 3, 4, dtype=I64)], "i64")],
    "aten.arange.default": [Case(lambda a: A.arange.default(7, dtype=I64), [r(1)], "7"),
                            Case(lambda a: A.arange.default(5, dtype=F32), [r(1)], "f32"),
                            _sym_arange(lambda n: n)],
    "aten.arange.start": [Case(lambda a: A.arange.start(2, 9, dtype=I64), [r(1)], "2..9"),
                          Case(lambda a: A.arange.start(-3, 4, dtype=F32), [r(1)], "negative start")],
    "aten.arange.start_step": [Case(lambda a: A.arange.start_step(1, 10, 3, dtype=I64), [r(1)], "step 3"),
                               Case(lambda a: A.arange.start_step(0.0, 1.0, 0.25, dtype=F32), [r(1)], "float step"),
                               Case(lambda a: A.arange.start_step(9, 0, -2, dtype=I64), [r(1)], "negative step")],
    "aten.bitwise_and.Tensor": [Case(lambda a, b: A.bitwise_and.Tensor(a, b), [r(3, 4, dtype=BOOL), r(4, dtype=BOOL)],
                                     "bool broadcast"),
                                Case(lambda a, b: A.bitwise_and.Tensor(a, b), [r(3, 4, dtype=I64), r(3, 4, dtype=I64)],
                                     "i64")],
    "aten.bitwise_or.Tensor": [Case(lambda a, b: A.bitwise_or.Tensor(a, b), [r(3, 4, dtype=BOOL), r(3, 1, dtype=BOOL)],
                                    "bool broadcast"),
                               Case(lambda a, b: A.bitwise_or.Tensor(a, b), [r(3, 4, dtype=I64), r(4, dtype=I64)], "i64")],
    "aten.bitwise_not.default": [Case(lambda a: A.bitwise_not.default(a), [r(3, 5, dtype=BOOL)], "bool"),
                                 Case(lambda a: A.bitwise_not.default(a), [r(3, 5, dtype=I64)], "i64")],
    "aten.bmm.default": [Case(lambda a, b: A.bmm.default(a, b), [r(2, 3, 4), r(2, 4, 5)], "batched"),
                         Case(lambda a, b: A.bmm.default(a, T(b)), [r(3, 1, 7), r(3, 5, 7)], "transposed, 1 row",
                              rtol=1e-4, atol=1e-5)],
    "aten.baddbmm.default": [
        Case(lambda s, a, b: A.baddbmm.default(s, a, b), [r(2, 1, 5), r(2, 3, 4), r(2, 4, 5)], "broadcast self",
             rtol=1e-4, atol=1e-5),
        Case(lambda s, a, b: A.baddbmm.default(s, a, T(b), beta=0.5, alpha=0.25), [r(2, 3, 5), r(2, 3, 4), r(2, 5, 4)],
             "beta, alpha, transposed", rtol=1e-4, atol=1e-5),
        Case(lambda s, a, b: A.baddbmm.default(s, a, b, beta=0.0), [torch.full((3, 1), float("nan")), r(2, 3, 4),
                                                                    r(2, 4, 5)], "beta 0 ignores NaN", rtol=1e-4, atol=1e-5)],
    "aten.cat.default": [Case(lambda a, b: A.cat.default([a, b], 1), [r(3, 2), r(3, 5)], "dim 1"),
                         Case(lambda a, b: A.cat.default([T(a), b]), [r(4, 3), r(1, 4)], "dim 0, transposed"),
                         Case(lambda a, b: A.cat.default([a, b], -1), [r(2, 0), r(2, 3)], "an empty piece"),
                         Case(lambda a, b: A.cat.default([a, b]), [r(2, 3, dtype=I64), r(1, 3, dtype=I64)], "i64")],
    "aten.chunk.default": [Case(lambda a: tuple(A.chunk.default(a, 3, 1)), [r(2, 7)], "uneven chunks"),
                           Case(lambda a: tuple(A.chunk.default(T(a), 2, 0)), [r(3, 4)], "transposed")],
    "aten.clamp.Tensor": [Case(lambda a, lo, hi: A.clamp.Tensor(a, lo, hi), [r(3, 4), r(4, lo=-2, hi=0), r(3, 1, lo=0, hi=2)],
                               "broadcast bounds"),
                          Case(lambda a, lo: A.clamp.Tensor(a, lo), [r(3, 4), r(4, lo=-1, hi=0)], "min only")],
    "aten.clamp.default": [Case(lambda a: A.clamp.default(a, -1.0, 1.5), [r(3, 4)], "both bounds"),
                           Case(lambda a: A.clamp.default(T(a), None, 0.5), [r(3, 4)], "max only, transposed"),
                           Case(lambda a: A.clamp.default(a, -2, 3), [r(3, 4, dtype=I64)], "i64")],
    "aten.clamp_.default": [Case(lambda a: A.clamp_.default(A.clone.default(a), -0.5, 0.5), [r(3, 4)], "in place")],
    "aten.clone.default": [Case(lambda a: A.clone.default(T(a)), [r(3, 4)], "transposed"),
                           Case(lambda a: A.clone.default(a), [r(3, dtype=I64)], "i64")],
    "aten.concat.default": [Case(lambda a, b: A.concat.default([a, b], 0), [r(2, 3), r(4, 3)], "dim 0")],
    "aten.contiguous.default": [Case(lambda a: A.contiguous.default(T(a)), [r(3, 4)], "transposed"),
                                Case(lambda a: A.contiguous.default(S(a)), [r(3, 5)], "strided")],
    "aten.copy_.default": [Case(lambda a, b: A.copy_.default(A.clone.default(a), b), [r(3, 4), r(4)], "broadcast source"),
                           Case(lambda a, b: A.copy_.default(A.clone.default(a), b), [r(3, 4), r(3, 4, dtype=I64)],
                                "i64 into f32")],
    "aten.cos.default": unary(A.cos.default),
    "aten.cumsum.default": [Case(lambda a: A.cumsum.default(a, 1), [r(3, 6)], "dim 1"),
                            Case(lambda a: A.cumsum.default(T(a), 0), [r(3, 6)], "dim 0 transposed"),
                            Case(lambda a: A.cumsum.default(a, -1), [r(2, 5, dtype=I64)], "i64"),
                            Case(lambda a: A.cumsum.default(a, -1, dtype=I64), [r(2, 5, dtype=BOOL)], "bool to i64")],
    "aten.detach.default": [Case(lambda a: A.detach.default(a), [r(3, 4)])],
    "aten.div.Scalar": scalar_op(A.div.Scalar, 3.0),
    "aten.div.Tensor": binary(A.div.Tensor, gen_b=nz)
    + [Case(lambda a, b: A.div.Tensor(a, b), [r(3, 4, dtype=I64), r(4, dtype=I64, lo=1, hi=4) + 1], "i64 true division")],
    "aten.div.Tensor_mode": [
        Case(lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="floor"), [r(3, 4, lo=-9, hi=9), nz(4)], "floor"),
        Case(lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="trunc"), [r(3, 4, lo=-9, hi=9), nz(3, 1)], "trunc"),
        Case(lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="floor"), [r(3, 4, dtype=I64, lo=-9, hi=9),
                                                                          torch.tensor([2, -3, 4, -5])], "i64 floor"),
        Case(lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="trunc"), [r(3, 4, dtype=I64, lo=-9, hi=9),
                                                                          torch.tensor([2, -3, 4, -5])], "i64 trunc")],
    "aten.div_.Tensor": inplace(A.div_.Tensor, b_gen=nz),
    "aten.dropout.default": [Case(lambda a: A.dropout.default(a, 0.25, False), [r(3, 4)], "eval: identity")],
    "aten.embedding.default": [Case(lambda w, i: A.embedding.default(w, i), [r(7, 5), idx(7, 2, 3)], "2-D ids"),
                               Case(lambda w, i: A.embedding.default(T(w), i), [r(5, 7), idx(7, 4)], "transposed table")],
    "aten.eq.Scalar": scalar_op(A.eq.Scalar, 0.0) + [Case(lambda a: A.eq.Scalar(a, 1), [r(3, 4, dtype=I64)], "i64")],
    "aten.eq.Tensor": compare(A.eq.Tensor),
    "aten.erf.default": unary(A.erf.default),
    # Inside (-1, 1) and its edges: ±1 give ±inf, past them NaN (torch's values).
    "aten.erfinv.default": unary(A.erfinv.default, gen=lambda *s: r(*s, lo=-0.999, hi=0.999)) + [
        Case(lambda a: A.erfinv.default(a), [torch.tensor([-1.0, 1.0, 1.5, -2.0, 0.0, 0.9999999])], "edges")],
    "aten.exp.default": unary(A.exp.default),
    "aten.expand.default": [Case(lambda a: A.clone.default(A.expand.default(a, [4, 3, 5])), [r(3, 1)], "new dim, size 1"),
                            Case(lambda a: A.clone.default(A.expand.default(a, [-1, 6])), [r(2, 1, dtype=I64)], "-1")],
    "aten.expm1.default": unary(A.expm1.default),
    "aten.flatten.using_ints": [Case(lambda a: A.flatten.using_ints(a, 1, 2), [r(2, 3, 4)], "dims 1..2"),
                                Case(lambda a: A.flatten.using_ints(T(a)), [r(2, 3, 4)], "all, transposed")],
    "aten.floor.default": unary(A.floor.default, gen=lambda *s: r(*s, lo=-5, hi=5)),
    "aten.full.default": [Case(lambda a: A.full.default([2, 3], 1.5, dtype=F32), [r(1)], "f32"),
                          Case(lambda a: A.full.default([4], 7, dtype=I64), [r(1)], "i64"),
                          Case(lambda a: A.full.default([2, 2], True, dtype=BOOL), [r(1)], "bool")],
    "aten.full_like.default": [Case(lambda a: A.full_like.default(a, -2.0), [r(3, 4)], "f32"),
                               Case(lambda a: A.full_like.default(a, 3), [r(3, dtype=I64)], "i64")],
    "aten.gather.default": [Case(lambda a, i: A.gather.default(a, 1, i), [r(3, 5), idx(5, 3, 4)], "dim 1"),
                            Case(lambda a, i: A.gather.default(T(a), 0, i), [r(5, 3), idx(3, 2, 5)], "dim 0 transposed")],
    "aten.ge.Scalar": scalar_op(A.ge.Scalar, 0.5, ints=True),
    "aten.ge.Tensor": compare(A.ge.Tensor),
    "aten.gelu.default": unary(A.gelu.default)
    + [Case(lambda a: A.gelu.default(a, approximate="tanh"), [r(3, 7, lo=-6, hi=6)], "tanh")],
    "aten.gt.Scalar": scalar_op(A.gt.Scalar, 0.5, ints=True),
    "aten.gt.Tensor": compare(A.gt.Tensor),
    "aten.index_select.default": [Case(lambda a, i: A.index_select.default(a, 0, i), [r(5, 3), idx(5, 4)], "dim 0"),
                                  Case(lambda a, i: A.index_select.default(T(a), 1, i), [r(5, 3), idx(3, 6)],
                                       "dim 1 transposed")],
    "aten.layer_norm.default": [
        Case(lambda a, w, b: A.layer_norm.default(a, [6], w, b, 1e-5), [r(2, 3, 6), r(6), r(6)], "weight and bias",
             rtol=1e-4, atol=1e-5),
        Case(lambda a: A.layer_norm.default(a, [6], None, None, 1e-3), [r(4, 6)], "no affine", rtol=1e-4, atol=1e-5)],
    "aten.le.Scalar": scalar_op(A.le.Scalar, 0.5, ints=True),
    "aten.le.Tensor": compare(A.le.Tensor),
    "aten.lift_fresh_copy.default": [Case(lambda a: A.lift_fresh_copy.default(a), [r(3, 4)])],
    "aten.linear.default": [Case(lambda x, w, b: A.linear.default(x, w, b), [r(2, 3, 4), r(5, 4), r(5)], "with bias",
                                 rtol=1e-4, atol=1e-5),
                            Case(lambda x, w: A.linear.default(x, w), [r(3, 7), r(5, 7)], "no bias", rtol=1e-4, atol=1e-5),
                            Case(lambda x, w: A.linear.default(T(x), w), [r(3, 4), r(2, 3)], "transposed input",
                                 rtol=1e-4, atol=1e-5)],
    "aten.log.default": unary(A.log.default, gen=pos),
    "aten.logical_and.default": [Case(lambda a, b: A.logical_and.default(a, b), [r(3, 4, dtype=BOOL), r(4, dtype=BOOL)],
                                      "bool")],
    "aten.logical_not.default": [Case(lambda a: A.logical_not.default(a), [r(3, 4, dtype=BOOL)], "bool"),
                                 Case(lambda a: A.logical_not.default(a), [r(3, 4, dtype=I64)], "i64")],
    "aten.lt.Scalar": scalar_op(A.lt.Scalar, 0.5, ints=True),
    "aten.lt.Tensor": compare(A.lt.Tensor),
    "aten.masked_fill.Scalar": [
        Case(lambda a, m: A.masked_fill.Scalar(a, m, -1e9), [r(3, 4), r(3, 4, dtype=BOOL)], "same shape"),
        Case(lambda a, m: A.masked_fill.Scalar(T(a), m, float("-inf")), [r(4, 3), r(4, dtype=BOOL)], "broadcast -inf"),
        Case(lambda a, m: A.masked_fill.Scalar(a, m, 5), [r(3, 4, dtype=I64), r(3, 1, dtype=BOOL)], "i64")],
    "aten.matmul.default": [
        Case(lambda a, b: A.matmul.default(a, b), [r(2, 3, 4), r(4, 5)], "3-D x 2-D", rtol=1e-4, atol=1e-5),
        Case(lambda a, b: A.matmul.default(a, b), [r(2, 1, 3, 4), r(3, 4, 2)], "broadcast batch", rtol=1e-4, atol=1e-5),
        Case(lambda a, b: A.matmul.default(a, T(b)), [r(3, 4), r(5, 4)], "2-D x transposed", rtol=1e-4, atol=1e-5),
        Case(lambda a, b: A.matmul.default(a, b), [r(4), r(4, 3)], "1-D x 2-D", rtol=1e-4, atol=1e-5)],
    "aten.max.dim": [Case(lambda a: tuple(A.max.dim(a, 1)), [r(3, 5)], "dim 1"),
                     Case(lambda a: tuple(A.max.dim(T(a), 0, True)), [r(3, 5)], "dim 0 keepdim, transposed")],
    "aten.max.other": binary(A.max.other),
    "aten.maximum.default": binary(A.maximum.default, ints=True),
    "aten.mean.dim": [Case(lambda a: A.mean.dim(a, [1]), [r(3, 5)], "dim 1"),
                      Case(lambda a: A.mean.dim(T(a), [-1], True), [r(3, 5, 4)], "keepdim transposed"),
                      Case(lambda a: A.mean.dim(a, [0, 2]), [r(3, 5, 4)], "two dims")],
    "aten.min.other": binary(A.min.other),
    "aten.minimum.default": binary(A.minimum.default, ints=True),
    "aten.mm.default": [Case(lambda a, b: A.mm.default(a, b), [r(3, 4), r(4, 5)], "3x4x5", rtol=1e-4, atol=1e-5),
                        Case(lambda a, b: A.mm.default(T(a), b), [r(4, 3), r(4, 2)], "transposed", rtol=1e-4, atol=1e-5)],
    "aten.mul.Scalar": scalar_op(A.mul.Scalar, -1.5, ints=True),
    "aten.mul.Tensor": binary(A.mul.Tensor, ints=True, bools=True),
    "aten.mul_.Tensor": inplace(A.mul_.Tensor),
    "aten.ne.Scalar": scalar_op(A.ne.Scalar, 0.0, ints=True),
    "aten.ne.Tensor": compare(A.ne.Tensor),
    "aten.neg.default": unary(A.neg.default, int_too=True),
    "aten.new_empty.default": [Case(lambda a: A.new_empty.default(a, [2, 3]), [r(4)], "shape only", shape_only=True)],
    "aten.new_ones.default": [Case(lambda a: A.new_ones.default(a, [2, 3]), [r(4)], "f32"),
                              Case(lambda a: A.new_ones.default(a, [3], dtype=I64), [r(4)], "i64")],
    "aten.new_zeros.default": [Case(lambda a: A.new_zeros.default(a, [2, 3]), [r(4)], "f32"),
                               Case(lambda a: A.new_zeros.default(a, [3]), [r(4, dtype=I64)], "i64")],
    "aten.ones.default": [Case(lambda a: A.ones.default([2, 3], dtype=F32), [r(1)], "f32"),
                          Case(lambda a: A.ones.default([4], dtype=BOOL), [r(1)], "bool")],
    "aten.ones_like.default": [Case(lambda a: A.ones_like.default(a), [r(3, 4)], "f32"),
                               Case(lambda a: A.ones_like.default(a), [r(3, dtype=I64)], "i64")],
    "aten.permute.default": [Case(lambda a: A.clone.default(A.permute.default(a, [2, 0, 1])), [r(2, 3, 4)], "2,0,1"),
                             Case(lambda a: A.clone.default(A.permute.default(T(a), [1, 0])), [r(3, 5)], "of a view")],
    "aten.polar.default": [Case(lambda m, t: A.view_as_real.default(A.polar.default(m, t)), [pos(3, 4), r(3, 4)],
                                "as real pairs")],
    "aten.pow.Scalar": [Case(lambda a: A.pow.Scalar(2.0, a), [r(3, 4)], "2 ** x"),
                        Case(lambda a: A.pow.Scalar(10000.0, a), [r(5, lo=0, hi=1)], "rope base")],
    "aten.pow.Tensor_Scalar": [Case(lambda a: A.pow.Tensor_Scalar(a, 2), [r(3, 5)], "square"),
                               # (exponents ±0.5 are captured as rsqrt / sqrt: canonical.py)
                               Case(lambda a: A.pow.Tensor_Scalar(a, -1.5), [pos(3, 5)], "-1.5"),
                               Case(lambda a: A.pow.Tensor_Scalar(T(a), 3.0), [r(3, 5)], "cube, transposed"),
                               Case(lambda a: A.pow.Tensor_Scalar(a, 2), [r(3, 5, dtype=I64)], "i64")],
    "aten.pow.Tensor_Tensor": [Case(lambda a, b: A.pow.Tensor_Tensor(a, b), [pos(3, 4), r(4)], "broadcast exponent"),
                               Case(lambda a, b: A.pow.Tensor_Tensor(a, b), [pos(), r(3)], "0-d base")],
    "aten.reciprocal.default": unary(A.reciprocal.default, gen=nz),
    "aten.relu.default": unary(A.relu.default, int_too=True),
    "aten.repeat_interleave.self_int": [
        Case(lambda a: A.repeat_interleave.self_int(a, 2, 1), [r(3, 4)], "dim 1"),
        Case(lambda a: A.repeat_interleave.self_int(T(a), 3, 0), [r(3, 2)], "dim 0 transposed"),
        Case(lambda a: A.repeat_interleave.self_int(a, 2, -1), [r(2, 3, dtype=I64)], "i64")],
    "aten.reshape.default": [Case(lambda a: A.reshape.default(a, [5, -1]), [r(3, 5)], "-1"),
                             Case(lambda a: A.reshape.default(T(a), [12]), [r(3, 4)], "of a transposed view")],
    "aten.rsqrt.default": unary(A.rsqrt.default, gen=pos),
    "aten.rsub.Scalar": scalar_op(A.rsub.Scalar, 1.0, ints=True),
    "aten.scatter.value": [Case(lambda a, i: A.scatter.value(a, 1, i, 2.0), [r(3, 5), idx(5, 3, 2)], "dim 1"),
                           Case(lambda a, i: A.scatter.value(a, 0, i, -1), [r(3, 4, dtype=I64), idx(3, 1, 4)], "i64")],
    "aten.scatter_.value": [Case(lambda a, i: A.scatter_.value(A.clone.default(a), 1, i, 0.0), [r(3, 5), idx(5, 3, 1)],
                                 "in place")],
    "aten.select.int": [Case(lambda a: A.clone.default(A.select.int(a, 1, 2)), [r(3, 5)], "dim 1"),
                        Case(lambda a: A.clone.default(A.select.int(a, 0, -1)), [r(3, 5, dtype=I64)], "negative index")],
    "aten.sigmoid.default": unary(A.sigmoid.default),
    "aten.silu.default": unary(A.silu.default),
    "aten.sin.default": unary(A.sin.default),
    "aten.slice.Tensor": [Case(lambda a: A.clone.default(A.slice.Tensor(a, 1, 1, 4)), [r(3, 6)], "1:4"),
                          Case(lambda a: A.clone.default(A.slice.Tensor(a, 1, -3, None, 2)), [r(3, 7)], "-3::2"),
                          Case(lambda a: A.clone.default(A.slice.Tensor(a, 0, 2, 100)), [r(4, 3)], "end past the size"),
                          Case(lambda a: A.clone.default(A.slice.Tensor(a, 0, 5, 9)), [r(4, 3)], "empty")],
    "aten.softmax.int": [Case(lambda a: A.softmax.int(a, -1), [r(3, 7)], "last dim"),
                         Case(lambda a: A.softmax.int(T(a), 0), [r(4, 3)], "dim 0 transposed"),
                         Case(lambda a: A.softmax.int(a, -1), [torch.tensor([[0.0, float("-inf"), 1.0]])], "-inf")],
    "aten.softplus.default": unary(A.softplus.default, gen=lambda *s: r(*s, lo=-30, hi=30))
    + [Case(lambda a: A.softplus.default(a, 2.0, 5.0), [r(3, 7, lo=-6, hi=6)], "beta 2, threshold 5")],
    "aten.split.Tensor": [Case(lambda a: tuple(A.split.Tensor(a, 2, 1)), [r(3, 5)], "uneven"),
                          Case(lambda a: tuple(A.split.Tensor(T(a), 3)), [r(2, 6)], "dim 0 transposed")],
    "aten.split_with_sizes.default": [
        Case(lambda a: tuple(A.split_with_sizes.default(a, [1, 3, 2], 1)), [r(2, 6)], "1,3,2"),
        Case(lambda a: tuple(A.split_with_sizes.default(a, [2, 0, 1], 0)), [r(3, 4)], "an empty piece")],
    "aten.sqrt.default": unary(A.sqrt.default, gen=pos),
    "aten.square.default": unary(A.square.default, int_too=True),
    "aten.squeeze.default": [Case(lambda a: A.squeeze.default(a), [r(1, 3, 1, 4)], "all")],
    "aten.squeeze.dim": [Case(lambda a: A.squeeze.dim(a, 2), [r(3, 4, 1)], "size 1"),
                         Case(lambda a: A.squeeze.dim(a, 0), [r(3, 4)], "size 3: unchanged")],
    "aten.squeeze.dims": [Case(lambda a: A.squeeze.dims(a, [0, 2]), [r(1, 3, 1, 4)], "two dims")],
    "aten.stack.default": [Case(lambda a, b: A.stack.default([a, b], -1), [r(3, 4), r(3, 4)], "last dim"),
                           Case(lambda a, b: A.stack.default([T(a), b]), [r(4, 3), r(3, 4)], "dim 0, transposed"),
                           Case(lambda a, b: A.stack.default([a, b], 1), [r(2, 3, dtype=I64), r(2, 3, dtype=I64)], "i64")],
    "aten.sub.Scalar": scalar_op(A.sub.Scalar, 0.75, ints=True),
    "aten.sub.Tensor": binary(A.sub.Tensor, ints=True)
    + [Case(lambda a, b: A.sub.Tensor(a, b, alpha=3), [r(3, 4), r(4)], "alpha 3")],
    "aten.sub_.Tensor": inplace(A.sub_.Tensor),
    "aten.sum.dim_IntList": [Case(lambda a: A.sum.dim_IntList(a, [1]), [r(3, 5)], "dim 1"),
                             Case(lambda a: A.sum.dim_IntList(T(a), [0, 1], True), [r(3, 5)], "all keepdim"),
                             Case(lambda a: A.sum.dim_IntList(a, [-1]), [r(3, 4, dtype=I64)], "i64"),
                             Case(lambda a: A.sum.dim_IntList(a, [-1], dtype=I64), [r(3, 4, dtype=BOOL)], "bool to i64")],
    "aten.sym_numel.default": [Case(lambda a: A.arange.default(A.sym_numel.default(a), dtype=I64), [r(5, 3)],
                                    "symbolic numel", dynamic={0: {0: N}}, capture_with=[r(4, 3)],
                                    patch=lambda ir: _as_sym_numel(ir))],
    "aten.sym_size.int": [Case(lambda a: A.new_zeros.default(a, [A.sym_size.int(a, 0), 2]), [r(7, 3)], "symbolic size",
                               dynamic={0: {0: N}}, capture_with=[r(4, 3)])],
    "aten.t.default": [Case(lambda a: A.clone.default(A.t.default(a)), [r(3, 5)], "2-D")],
    "aten.tanh.default": unary(A.tanh.default),
    "aten.to.device": [Case(lambda a: A.to.device(a, torch.device("cpu"), F32), [r(3, 4)], "cpu f32")],
    "aten.to.dtype": [Case(lambda a: A.to.dtype(a, F32), [r(3, 4, dtype=I64)], "i64 to f32"),
                      Case(lambda a: A.to.dtype(a, I64), [r(3, 4, lo=-5, hi=5)], "f32 to i64 (truncates)"),
                      Case(lambda a: A.to.dtype(T(a), torch.bfloat16), [r(3, 4)], "f32 to bf16")],
    "aten.to.dtype_layout": [Case(lambda a: A.to.dtype_layout(a, dtype=F32), [r(3, 4, dtype=BOOL)], "bool to f32")],
    "aten.to.other": [Case(lambda a, b: A.to.other(a, b), [r(3, 4, dtype=I64), r(2)], "like an f32 tensor")],
    "aten.topk.default": [Case(lambda a: tuple(A.topk.default(a, 3)), [r(4, 9)], "largest"),
                          Case(lambda a: tuple(A.topk.default(T(a), 2, 0, False)), [r(4, 6)], "smallest, dim 0")],
    "aten.transpose.int": [Case(lambda a: A.clone.default(A.transpose.int(a, 0, 2)), [r(2, 3, 4)], "0, 2")],
    "aten.type_as.default": [Case(lambda a, b: A.type_as.default(a, b), [r(3, 4, dtype=I64), r(2)], "i64 as f32")],
    "aten.unbind.int": [Case(lambda a: tuple(A.unbind.int(a, 1)), [r(2, 3)], "dim 1")],
    "aten.unsqueeze.default": [Case(lambda a: A.unsqueeze.default(a, 1), [r(3, 4)], "dim 1"),
                               Case(lambda a: A.unsqueeze.default(a, -1), [r(3, dtype=I64)], "last")],
    "aten.view.default": [Case(lambda a: A.view.default(a, [2, -1]), [r(3, 4)], "-1"),
                          Case(lambda a: A.view.default(a, [4]), [r(2, 2, dtype=I64)], "i64")],
    "aten.view_as_complex.default": [Case(lambda a: A.view_as_real.default(A.mul.Tensor(A.view_as_complex.default(a),
                                                                                       A.view_as_complex.default(a))),
                                          [r(3, 4, 2)], "complex square")],
    "aten.view_as_real.default": [Case(lambda a: A.clone.default(A.view_as_real.default(A.view_as_complex.default(a))),
                                       [r(3, 2)], "round trip")],
    "aten.where.self": [Case(lambda c, a, b: A.where.self(c, a, b), [r(3, 4, dtype=BOOL), r(3, 4), r(4)], "broadcast"),
                        Case(lambda c, a, b: A.where.self(c, a, b), [r(3, 1, dtype=BOOL), r(3, 4, dtype=I64), r(4, dtype=I64)],
                             "i64")],
    "aten.zeros.default": [Case(lambda a: A.zeros.default([2, 3], dtype=F32), [r(1)], "f32"),
                           Case(lambda a: A.zeros.default([3], dtype=I64), [r(1)], "i64")],
    "aten.zeros_like.default": [Case(lambda a: A.zeros_like.default(a), [r(3, 4)], "f32"),
                                Case(lambda a: A.zeros_like.default(a), [r(3, dtype=BOOL)], "bool")],
    # Shape arithmetic: a dynamic dim captured at one size and run at another.
    "getitem": [_getitem_case()],
    "operator.add": [_sym_arange(lambda n: n + 2)],
    "operator.floordiv": [_sym_arange(lambda n: n // 2)],
    "operator.mod": [_sym_arange(lambda n: n % 4 + 2)],
    "operator.mul": [_sym_arange(lambda n: n * 3)],
    "operator.neg": [Case(lambda a: A.arange.start(-a.shape[0], 0, dtype=I64), [r(9, 3)], "negated size",
                          dynamic={0: {0: N}}, capture_with=[r(6, 3)])],
    "operator.sub": [_sym_arange(lambda n: n - 1)],
    "operator.truediv": [Case(lambda a: A.mul.Scalar(a, a.shape[0] / 4), [r(9, 3)], "size / 4",
                              dynamic={0: {0: N}}, capture_with=[r(6, 3)])],
    "torch.sym_float": [Case(lambda a: A.mul.Scalar(a, torch.sym_float(a.shape[0])), [r(9, 3)], "float(size)",
                             dynamic={0: {0: N}}, capture_with=[r(6, 3)])],
    "torch.sym_int": [dataclasses.replace(_sym_arange(lambda n: torch.sym_int(n / 2)),
                                          patch=lambda ir: _renamed(ir, "math.trunc", "torch.sym_int"))],
    "math.trunc": [_sym_arange(lambda n: torch.sym_int(n / 2))],
    "math.floor": [_sym_arange(lambda n: math.floor(n / 2))],
    "math.ceil": [_sym_arange(lambda n: math.ceil(n / 3))],
    "torch.sym_max": [_sym_arange(lambda n: torch.sym_max(n, 7))],
    "torch.sym_min": [_sym_arange(lambda n: torch.sym_min(n, 7))],
}

# Ops inserted by capture or the fusers whose torch reference is a whole model path, each checked
# against torch elsewhere (every one of them must be named here or have a case above).
ELSEWHERE = {
    "fuselm.attention.default": "needs the engine's KV cache and sequence table: parity tests, kernels_attention_test",
    "fuselm.mla_attention.default": "needs the latent KV cache: test_mla parity, fusers_mla_test",
    "fuselm.all_reduce.default": "needs an MPI communicator: test_tensor_parallel",
    "fuselm.act_and_mul.default": "put in by the GLU fuser: test_fusers fused vs unfused logits, kernels_activation_test",
    "fuselm.rms_norm.default": "put in by the RMSNorm fuser: test_fusers fused vs unfused logits, kernels_norm_test",
    "fuselm.rope.default": "put in by the rope fuser: test_fusers fused vs unfused logits, runtime_ops_test",
    "fuselm.softcap.default": "put in by the softcap fuser: test_fusers fused vs unfused logits (bit-identical), "
                              "runtime_ops_test (against the div/tanh/mul graph at zero tolerance)",
    "fuselm.moe_route.default": "put in by the MoE fuser: test_moe against transformers, kernels_moe_route_test",
    "fuselm.experts_shared.default": "put in by the MoE fuser: test_moe against transformers",
    "fuselm.select_rows.default": "put in by logit_rows: passes_logit_rows_test, parity tests",
    "fuselm.all_gather.default": "needs an MPI communicator: test_tensor_parallel, runtime_ops_test",
    "fuselm.vocab_embedding.default": "put in by the sharding plan (a rank's vocabulary slice): test_tensor_parallel, runtime_ops_test",
    "fuselm.rms_norm_split.default": "put in by the sharding plan (a norm over a split width, with an all-reduce): test_tensor_parallel, runtime_ops_test",
    **{f"fuselm.{op}.default": "needs the engine's state slots: test_recurrent_ops (against transformers' torch "
                               "fallbacks), runtime_recurrent_ops_test, kernels_recurrent_test"
       for op in ("causal_conv1d", "ssd_scan", "selective_scan", "gated_delta_rule")},
    "fuselm.decay_softmax_scan.default": "needs the engine's state slots; put in where a recurrence written inline "
                                         "is proved: test_recurrence_by_hand, runtime_recurrent_ops_test, "
                                         "kernels_recurrent_test (against its definition in double)",
    "fuselm.linear_scan.default": "needs the engine's state slots; put in where a recurrence written inline is "
                                  "proved: test_recurrence_by_hand, runtime_recurrent_ops_test, kernels_recurrent_test "
                                  "(against the recurrence in double)",
}


def _experts_ref(act, limit, concatenated):
    """Top-k experts in torch: act(gate) * up, or act(clamp(gate, max=L)) * clamp(up, -L, L) with L > 0."""
    def ref(hidden, ids, w, gate_up, down):
        out = torch.zeros_like(hidden)
        i = down.shape[-1]
        for t in range(hidden.shape[0]):
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                y = gate_up[e] @ hidden[t]
                g, u = (y[:i], y[i:]) if concatenated else (y[::2], y[1::2])
                if limit > 0:
                    g, u = g.clamp(max=limit), u.clamp(-limit, limit)
                out[t] += w[t, j] * (down[e] @ (act(g) * u))
        return out
    return ref


def _experts_cases():
    from fuselm_capture import ops  # noqa: F401  (registers torch.ops.fuselm.*)
    e, h, i, t, k = 5, 6, 4, 7, 2
    out = []
    for name, act, limit, concatenated in (("silu", torch.nn.functional.silu, 0.0, True),
                                           ("gelu", torch.nn.functional.gelu, 0.25, False)):
        def f(x, ids, w, gu, dn, name=name, limit=limit, concatenated=concatenated):
            return torch.ops.fuselm.experts(x, ids, w, gu, dn, None, None, name, concatenated, False, True, 0.0, limit)
        g = torch.Generator().manual_seed(5)
        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
        what = f"{name} top-2 of 5" + (f", gate and up clamped at {limit}, interleaved" if limit else "")
        out.append((Case(f, [r(t, h), ids, torch.rand(t, k, generator=g), r(e, 2 * i, h), r(e, h, i)], what,
                         rtol=1e-4, atol=1e-5), _experts_ref(act, limit, concatenated)))
    return out


class OneOp(nn.Module):
    """forward(i0, i1, ...) = fn(i0, i1, ...)."""

    def __init__(self, fn, n):
        super().__init__()
        self.fn = fn
        names = ", ".join(f"i{k}" for k in range(n))
        ns = {}
        exec(f"def forward(self, {names}):\n    return self.fn({names})\n", ns)  # noqa: S102 - a signature of n names
        self.forward = ns["forward"].__get__(self)


def _outputs(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.fixture(scope="module")
def registry() -> list[str]:
    assert RUNNER.exists(), f"{RUNNER} is missing: build first (ninja -C build)"
    out = subprocess.run([str(RUNNER), "--list-ops"], capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[tuple[Case, object, str]]]:
    """op -> [(case, engine outputs or None, error text or IR check failure)], all cases run in one
    fuselm_run_graph call."""
    from safetensors.torch import load_file, save_file
    from fuselm_capture.capture import capture_module
    root = tmp_path_factory.mktemp("op_cases")
    cases = {op: [(c, None) for c in cs] for op, cs in CASES.items()}
    cases["fuselm.experts.default"] = _experts_cases()
    layout = {}
    for op, cs in cases.items():
        for k, (c, _) in enumerate(cs):
            d = root / f"{op}.{k}"
            d.mkdir()
            module = OneOp(c.fn, len(c.inputs)).eval()
            example = c.capture_with or c.inputs
            dyn = {f"i{j}": (c.dynamic or {}).get(j) for j in range(len(c.inputs))}
            kwargs = {f"i{j}": t.clone() for j, t in enumerate(example)}
            try:
                capture_module(module, kwargs, dyn, d / "fuselm-ir")
                ir = json.loads((d / "fuselm-ir" / "ir.json").read_text())
                if c.patch:
                    ir = c.patch(ir)
                    (d / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
                held = {n["op"] for n in ir["nodes"]}
                note = "" if op in held else f"the captured graph does not hold {op} (it holds {sorted(held)})"
            except Exception as e:  # noqa: BLE001 - a case that does not capture is its failure
                note = f"capture failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            save_file({f"i{j}": t.contiguous() for j, t in enumerate(c.inputs)}, str(d / "inputs.safetensors"))
            layout.setdefault(op, []).append((c, d, note))
    subprocess.run([str(RUNNER), str(root)], capture_output=True, text=True, check=True, timeout=600)
    out = {}
    for op, entries in layout.items():
        out[op] = []
        for k, (c, d, note) in enumerate(entries):
            ref = cases[op][k][1]
            got, err = None, note
            if not err and (d / "error.txt").exists():
                err = (d / "error.txt").read_text().strip()
            elif not err:
                files = load_file(str(d / "outputs.safetensors"))
                got = [files[f"out{j}"] for j in range(len(files))]
            out[op].append((c, got, err, ref))
    return out


def test_every_registered_op_has_a_case(registry):
    cased = set(CASES) | {"fuselm.experts.default"}
    missing = [op for op in registry if op not in cased and op not in ELSEWHERE]
    assert not missing, f"ops of the registry with no case in test_ops_torch.py: {missing}"
    stale = sorted((cased | set(ELSEWHERE)) - set(registry))
    assert not stale, f"cases for ops the registry does not have: {stale}"


@pytest.mark.parametrize("op", sorted(CASES) + ["fuselm.experts.default"])
def test_op_matches_torch(op, results):
    failures = []
    for c, got, err, ref in results[op]:
        label = f"{op} [{c.what}]"
        if err:
            failures.append(f"{label}: {err}")
            continue
        inputs = [t.clone() for t in c.inputs]
        want = _outputs(ref(*inputs) if ref else c.fn(*inputs))
        if len(got) != len(want):
            failures.append(f"{label}: {len(got)} outputs, torch gives {len(want)}")
            continue
        for j, (g, w) in enumerate(zip(got, want)):
            if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
                failures.append(f"{label} output {j}: {g.dtype} {tuple(g.shape)}, torch {w.dtype} {tuple(w.shape)}")
            elif c.shape_only:
                continue
            elif w.dtype.is_floating_point:
                if not torch.allclose(g.double(), w.double(), rtol=c.rtol, atol=c.atol, equal_nan=True):
                    diff = (g.double() - w.double()).abs().nan_to_num(float("inf")).max()
                    failures.append(f"{label} output {j}: max abs diff {float(diff):.3g}")
            elif not torch.equal(g, w):
                failures.append(f"{label} output {j}: {g.tolist()} != torch {w.tolist()}")
    assert not failures, "\n".join(failures)
