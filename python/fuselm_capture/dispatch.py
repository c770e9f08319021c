"""Recurrent kernels found by their dispatch point, replaced by fuselm's stateful ops at capture.

transformers 5 routes every recurrent kernel (a causal convolution, a state-space scan, a delta
rule) through a named dispatch point: `use_kernel_func_from_hub_with_fallback(func_name, package)`
(transformers/integrations/hub_kernels.py) decorates the module-level torch fallback and returns
a `wrapped` function that closes over `func_name` and `torch_function`. While exporting, capture
puts a substitute in the place of each such function it knows (DISPATCH: kernel names only, never
a model's) in the module globals of the model's classes, and restores them afterwards. A
substitute binds the call to the torch fallback's own signature and calls the fuselm op
(recurrent_ops.py) that computes the same over the engine's per-sequence state, so the graph holds
one op per kernel call and no token loop. An argument the op cannot express (an initial state, a
returned final state, an activation or a gate it lacks) that is not the fallback's neutral value
is refused, naming the dispatch point and the module.

Each op's `state_idx` is the order of the op in the graph (number_states, after export).
"""
from __future__ import annotations

import contextlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import recurrent_ops  # noqa: F401 - registers torch.ops.fuselm.{causal_conv1d, ssd_scan, ...}


class DispatchRefused(RuntimeError):
    """A dispatch-point call that the fuselm op cannot express (names the point and the module)."""


RECURRENT_OPS = ("causal_conv1d", "ssd_scan", "selective_scan", "gated_delta_rule", "decay_softmax_scan",
                 "linear_scan")

# ACT2FN names whose function is SiLU: the only activation the convolution op applies.
_SILU_NAMES = ("silu", "swish")


@dataclass
class Call:
    """One call of a dispatch point: its arguments bound to the torch fallback's signature (defaults
    filled in), the point's kernel name and the module that made the call."""
    name: str
    args: dict
    module: str
    state_idx: int

    def refuse(self, why: str) -> DispatchRefused:
        return DispatchRefused(f"dispatch point {self.name} called from module {self.module}: {why}; "
                               "fuselm's op cannot express it")

    def shape(self, arg: str, dims: int) -> tuple:
        """The argument's shape, refused unless it is a tensor of `dims` dims with batch 1 (dims > 1)."""
        t = self.args[arg]
        if not isinstance(t, torch.Tensor) or t.dim() != dims:
            raise self.refuse(f"{arg} is not a {dims}-D tensor")
        if dims > 1 and t.shape[0] != 1:
            raise self.refuse(f"{arg} has batch {t.shape[0]}, not 1")
        return tuple(t.shape)

    def optional(self, arg: str, shape: tuple) -> torch.Tensor | None:
        """The argument when it is None or a tensor of exactly `shape`; refused otherwise."""
        t = self.args[arg]
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape)):
            raise self.refuse(f"{arg} is not None or a tensor of shape {list(shape)}")
        return t


@dataclass
class Substitute:
    """How one dispatch point becomes a fuselm op.

    run(call) -> what the torch fallback returns, computed by the op. `fixed`: arguments the op
    has no place for, and the only value each may take (the fallback's neutral one, also where the
    fallback's signature has no default). `ignored`: arguments that choose only how the fallback
    computes (a chunk length, an alternative scan algorithm), never the result. Every other argument
    that run does not read must be the fallback's default."""
    run: Callable[[Call], object]
    reads: tuple[str, ...]
    fixed: dict = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def _conv_activation(call: Call) -> str:
    act = call.args["activation"]
    if act is None:
        return "none"
    if isinstance(act, str) and act in _SILU_NAMES:
        return "silu"
    raise call.refuse(f"activation {act!r} is none of None, silu")


def _causal_conv1d(call: Call):
    _, c, _ = call.shape("hidden_states", 3)
    w = call.args["weight"]
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[0] != c:
        raise call.refuse(f"weight is not [{c}, K] (one filter per channel)")
    bias = call.optional("bias", (c,))
    return torch.ops.fuselm.causal_conv1d(call.args["hidden_states"], w, bias, _conv_activation(call), call.state_idx)


def _ssd_scan(call: Call):
    _, t, h, _ = call.shape("hidden_states", 4)
    if call.shape("dt", 3)[1:] != (t, h):
        raise call.refuse(f"dt is not [1, {t}, {h}]")
    g = call.shape("B", 4)[2]
    if call.shape("B", 4)[1] != t or call.shape("C", 4) != call.shape("B", 4) or h % g:
        raise call.refuse(f"B and C are not [1, {t}, G, N] with G dividing {h}")
    a = call.args["A"]
    if not isinstance(a, torch.Tensor) or tuple(a.shape) != (h,):
        raise call.refuse(f"A is not [{h}] (one decay per head)")
    lo, hi = call.args["dt_limit"]
    return torch.ops.fuselm.ssd_scan(call.args["hidden_states"], call.args["dt"], a, call.args["B"], call.args["C"],
                                     call.optional("D", (h,)), call.optional("dt_bias", (h,)),
                                     bool(call.args["dt_softplus"]), float(lo), float(hi), call.state_idx)


def _selective_scan(call: Call):
    _, d, t = call.shape("hidden_states", 3)
    if call.shape("dt", 3) != (1, d, t):
        raise call.refuse(f"dt is not [1, {d}, {t}]")
    a = call.args["A"]
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.shape[0] != d:
        raise call.refuse(f"A is not [{d}, N]")
    n = a.shape[1]
    if call.shape("B", 3) != (1, n, t) or call.shape("C", 3) != (1, n, t):
        raise call.refuse(f"B and C are not [1, {n}, {t}]")
    return torch.ops.fuselm.selective_scan(call.args["hidden_states"], call.args["dt"], a, call.args["B"],
                                           call.args["C"], call.optional("D", (d,)), call.optional("z", (1, d, t)),
                                           call.optional("delta_bias", (d,)), bool(call.args["delta_softplus"]),
                                           call.state_idx)


def _delta_rule(call: Call):
    _, t, hk, dk = call.shape("query", 4)
    if call.shape("key", 4) != (1, t, hk, dk):
        raise call.refuse(f"key is not [1, {t}, {hk}, {dk}] as query")
    _, _, hv, _ = call.shape("value", 4)
    if call.shape("value", 4)[1] != t or hv % hk:
        raise call.refuse(f"value is not [1, {t}, Hv, Dv] with {hk} key heads dividing Hv")
    g = call.args["g"]
    if not isinstance(g, torch.Tensor) or tuple(g.shape) not in ((1, t, hv), (1, t, hv, dk)):
        raise call.refuse(f"g is not [1, {t}, {hv}] or [1, {t}, {hv}, {dk}]")
    if call.shape("beta", 3) != (1, t, hv):
        raise call.refuse(f"beta is not [1, {t}, {hv}]")
    out = torch.ops.fuselm.gated_delta_rule(call.args["query"], call.args["key"], call.args["value"], g,
                                            call.args["beta"], bool(call.args["use_qk_l2norm_in_kernel"]),
                                            call.state_idx)
    return out, None  # the fallback's (output, final state), no final state requested


_NO_STATE = {"initial_state": None, "output_final_state": False}
_DELTA_READS = ("query", "key", "value", "g", "beta", "use_qk_l2norm_in_kernel")

# Kernel name (the dispatch point's func_name) -> its substitute. The only place that names them.
# mamba_split_conv1d_scan_combined and mamba_inner_fn are training-only fused paths whose torch
# fallbacks return None (the caller then runs the unfused kernels, substituted here): None keeps them.
DISPATCH: dict[str, Substitute | None] = {
    "causal_conv1d_fn": Substitute(_causal_conv1d, ("hidden_states", "weight", "bias", "activation")),
    # The single-token forms update a state the model passes in (its own cache): refused by `fixed`
    # if ever called (capture exports without a cache, so the model takes the sequence forms).
    "causal_conv1d_update": Substitute(_causal_conv1d, ("hidden_states", "weight", "bias", "activation"),
                                       fixed={"conv_state": None}),
    "mamba_chunk_scan_combined": Substitute(
        _ssd_scan, ("hidden_states", "dt", "A", "B", "C", "D", "dt_bias", "dt_softplus", "dt_limit"),
        fixed={"initial_states": None, "return_final_states": False}, ignored=("chunk_size",)),
    "selective_state_update": Substitute(_ssd_scan, (), fixed={"state": None}),
    "selective_scan_fn": Substitute(
        _selective_scan, ("hidden_states", "dt", "A", "B", "C", "D", "z", "delta_bias", "delta_softplus"),
        fixed={"return_last_state": False}, ignored=("use_mambapy", "use_associative_scan")),
    "chunk_gated_delta_rule": Substitute(_delta_rule, _DELTA_READS, fixed=_NO_STATE, ignored=("chunk_size",)),
    "fused_recurrent_gated_delta_rule": Substitute(_delta_rule, _DELTA_READS, fixed=_NO_STATE),
    "chunk_kda": Substitute(_delta_rule, _DELTA_READS, fixed=_NO_STATE, ignored=("chunk_size",)),
    "fused_recurrent_kda": Substitute(_delta_rule, _DELTA_READS, fixed=_NO_STATE),
    "mamba_split_conv1d_scan_combined": None,
    "mamba_inner_fn": None,
}


def dispatch_point(fn) -> tuple[str, Callable] | None:
    """(kernel name, torch fallback) of a function that use_kernel_func_from_hub_with_fallback
    returned, read from the variables its `wrapped` closes over; None for any other object."""
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not closure:
        return None
    cells = dict(zip(code.co_freevars, closure))
    if "func_name" not in cells or "torch_function" not in cells:
        return None
    try:
        name, fallback = cells["func_name"].cell_contents, cells["torch_function"].cell_contents
    except ValueError:  # an empty cell
        return None
    return (name, fallback) if isinstance(name, str) and callable(fallback) else None


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable values differ
        return False


def _check(call: Call, sub: Substitute, sig: inspect.Signature) -> None:
    """Refuses an argument the op cannot express that differs from its neutral value."""
    for pname, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or pname in sub.reads or pname in sub.ignored:
            continue
        value = call.args.get(pname)
        if pname in sub.fixed:
            if isinstance(value, torch.Tensor):
                raise call.refuse(f"a state is given ({pname} {list(value.shape)}), where the engine keeps "
                                  "each sequence's state itself")
            if not _same(value, sub.fixed[pname]):
                raise call.refuse(f"it passes {pname}={_short(value)} (the op returns no state)")
        elif p.default is p.empty or not _same(value, p.default):
            raise call.refuse(f"it passes {pname}={_short(value)}, not the fallback's default")


def _short(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor {list(value.shape)}"
    return repr(value)


class Dispatcher:
    """The substitutes of one export: patches the module globals of the model's classes, names the
    calling module of each call, and counts the calls (provisional state indices)."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(m): n or "<root>" for n, m in model.named_modules()}
        self.model = model
        self.calls = 0
        self.patched: list[tuple[dict, str, object]] = []

    def _module_of_caller(self) -> str:
        frame = inspect.currentframe()
        while frame is not None:
            obj = frame.f_locals.get("self")
            if isinstance(obj, torch.nn.Module) and id(obj) in self.names:
                return f"{self.names[id(obj)]} ({type(obj).__name__})"
            frame = frame.f_back
        return "<unknown module>"

    def substitute(self, name: str, fallback: Callable, sub: Substitute) -> Callable:
        sig = inspect.signature(fallback)
        named = {n for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

        def fuselm_substitute(*args, **kwargs):
            # As `wrapped` does, keyword arguments the fallback does not name are dropped.
            bound = sig.bind(*args, **{k: v for k, v in kwargs.items() if k in named})
            bound.apply_defaults()
            call = Call(name, dict(bound.arguments), self._module_of_caller(), self.calls)
            _check(call, sub, sig)
            self.calls += 1
            return sub.run(call)
        fuselm_substitute.__wrapped__ = fallback
        return fuselm_substitute

    def patch(self) -> None:
        seen = set()
        for m in self.model.modules():
            for cls in type(m).__mro__:
                mod = sys.modules.get(cls.__module__)
                if mod is None or id(mod) in seen:
                    continue
                seen.add(id(mod))
                for gname, value in list(vars(mod).items()):
                    point = dispatch_point(value)
                    if point is None or point[0] not in DISPATCH or DISPATCH[point[0]] is None:
                        continue
                    self.patched.append((vars(mod), gname, value))
                    vars(mod)[gname] = self.substitute(point[0], point[1], DISPATCH[point[0]])

    def restore(self) -> None:
        for namespace, gname, value in reversed(self.patched):
            namespace[gname] = value
        self.patched.clear()


@contextlib.contextmanager
def recurrent_dispatch(model: torch.nn.Module):
    """Within: every known dispatch point that the model's classes call through their module
    globals runs the fuselm op instead of its torch fallback."""
    d = Dispatcher(model)
    d.patch()
    try:
        yield d
    finally:
        d.restore()


def number_states(ep) -> int:
    """Sets each recurrent op's state_idx (its last argument) to its order in the graph (0, 1, ...);
    returns how many there are. The index is the op's own: the engine keeps state i in slot part i."""
    targets = {getattr(torch.ops.fuselm, op).default for op in RECURRENT_OPS}
    n = 0
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target in targets:
            node.args = (*node.args[:-1], n)
            n += 1
    return n
