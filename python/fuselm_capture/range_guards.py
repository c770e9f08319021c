"""Shape guards that hold at every token count of the dynamic range, dropped before torch.export checks them.

torch.export records a guard for each shape comparison it cannot decide by value ranges, then
refuses the export (`Constraints violated (num_tokens)`) when a guard is not implied by the dynamic
range. Some guards are true for every length all the same, and only torch's range analysis is too
weak to see it: a range check against a constant that comes back as `T*min(64, 64*T) == 64*T`
(true for T >= 1). Such a guard is evaluated at every integer of the symbol's range at once
(torch's own reference interpreter of its sympy functions, on an int64 tensor); one that holds
everywhere constrains nothing and is dropped. A guard that fails for some length is kept, so the
export still refuses a forward that really specialises the count (length_watch.py names it).
"""
from __future__ import annotations

import contextlib

import sympy
import torch

# Widest range proved by full evaluation (one int64 tensor of this many lengths per guard).
MAX_RANGE = 1 << 22


def _true_over_range(expr, sym, lo: int, hi: int) -> bool | None:
    """Whether boolean expr is true at every integer lo..hi of sym, or None when torch's reference
    interpreter does not cover one of its functions."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._sympy.interp import sympy_interp
    from torch.utils._sympy.reference import TensorReferenceAnalysis
    try:  # export's fake mode is still on: these are real lengths
        with unset_fake_temporarily():
            out = sympy_interp(TensorReferenceAnalysis, {sym: torch.arange(lo, hi + 1, dtype=torch.int64)}, expr)
            out = out if isinstance(out, torch.Tensor) else None
            return None if out is None or out.dtype != torch.bool else bool(out.all())
    except Exception:  # noqa: BLE001 - a function the interpreter lacks: not proved
        return None


def _one_symbol_range(expr, var_to_range):
    """(symbol, lo, hi) when boolean expr has one symbol whose range is finite and at most
    MAX_RANGE wide, else None."""
    free = list(getattr(expr, "free_symbols", ()))
    if len(free) != 1 or free[0] not in var_to_range or not isinstance(expr, sympy.logic.boolalg.Boolean):
        return None
    sym = free[0]
    rng = var_to_range[sym]
    if not (isinstance(rng.lower, sympy.Integer) and isinstance(rng.upper, sympy.Integer)):  # torch's int_oo is not
        return None
    lo, hi = int(rng.lower), int(rng.upper)
    return (sym, lo, hi) if lo <= hi and hi - lo + 1 <= MAX_RANGE else None


def holds_everywhere(expr, var_to_range) -> bool:
    """Whether a boolean guard over one symbol with a finite range is true at every integer of it.
    The vectorised evaluation is checked against sympy's own at the range's ends."""
    found = _one_symbol_range(expr, var_to_range)
    if found is None:
        return False
    sym, lo, hi = found
    if not _true_over_range(expr, sym, lo, hi):
        return False
    try:
        return all(bool(expr.xreplace({sym: v})) for v in {lo, hi, (lo + hi) // 2})
    except TypeError:  # not decidable on an integer
        return False


def holds_up_to(expr, var_to_range) -> int | None:
    """The largest N of the range of expr's one symbol such that boolean expr holds at every integer
    from the range's start to N (found by bisection, each step a full evaluation), or None when it
    fails at the start or cannot be evaluated."""
    found = _one_symbol_range(expr, var_to_range)
    if found is None:
        return None
    sym, lo, hi = found
    if not _true_over_range(expr, sym, lo, lo):
        return None
    if _true_over_range(expr, sym, lo, hi):
        return hi
    good, bad = lo, hi  # holds on lo..good; fails somewhere in lo..bad
    while bad - good > 1:
        mid = (good + bad) // 2
        if _true_over_range(expr, sym, lo, mid):
            good = mid
        else:
            bad = mid
    return good


@contextlib.contextmanager
def drop_proved_guards():
    """Within: ShapeEnv.produce_guards (which export's constraint check calls) first drops the
    guards that hold at every value of their symbol's range."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    saved = ShapeEnv.produce_guards

    def produce_guards(self, *args, **kwargs):
        self.guards = [g for g in self.guards if not holds_everywhere(g.expr, self.var_to_range)]
        return saved(self, *args, **kwargs)

    ShapeEnv.produce_guards = produce_guards
    try:
        yield
    finally:
        ShapeEnv.produce_guards = saved
