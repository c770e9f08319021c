"""Which module specialised the token count, when torch.export reports `Constraints violated`.

A recurrence written inline (a Python loop over the tokens, no kernel dispatch point that capture
replaces) or a forward that branches on the length adds shape guards that do not hold for every
token count of the dynamic range (`s0 == 8`, `min(16, s0) != 16`). torch.export reports them only
once tracing is over, with no module on the stack. While exporting, global forward hooks note the
guards (and constant replacements) each module call added; the innermost module whose call added
one that fails somewhere in the range is the one that specialised the count.
"""
from __future__ import annotations

import contextlib

import torch

# Token counts tried against a new guard (clipped to the symbol's range): small counts, both sides
# of powers of two (chunk and block lengths), and the range's ends.
_PROBES = sorted({v for p in range(1, 15) for v in (2 ** p - 1, 2 ** p, 2 ** p + 1)} | {2, 3, 5, 7, 300})


def _shape_env():
    from torch._guards import detect_fake_mode
    mode = detect_fake_mode()
    return mode.shape_env if mode is not None else None


def _fails_in_range(env, expr) -> bool:
    """Whether a guard over one backed symbol is false for some probed value of its range."""
    free = list(getattr(expr, "free_symbols", ()))
    if len(free) != 1 or free[0] not in env.var_to_range:
        return False
    sym = free[0]
    rng = env.var_to_range[sym]
    lo, hi = int(rng.lower), int(rng.upper) if rng.upper.is_finite else 1 << 20
    for v in [lo, hi] + [p for p in _PROBES if lo <= p <= hi]:
        try:
            if not bool(expr.xreplace({sym: v})):
                return True
        except TypeError:  # not decidable on an integer: not a length guard
            return False
    return False


class LengthWatch:
    """Records the innermost module whose forward added a guard that fails for some token count."""

    def __init__(self, names: dict[int, str]):
        self.names = names
        self.culprit: torch.nn.Module | None = None
        self._stack: list[tuple[int, tuple | None]] = []

    def _snapshot(self):
        env = _shape_env()
        if env is None:
            return None
        return len(env.guards), frozenset(k for k, v in env.replacements.items() if v.is_number)

    def pre(self, module, args) -> None:
        self._stack.append((id(module), self._snapshot() if self.culprit is None else None))

    def post(self, module, args, out) -> None:
        before = None
        while self._stack:  # a call that raised (and was caught) never reached its post hook
            key, snap = self._stack.pop()
            if key == id(module):
                before = snap
                break
        if before is None or self.culprit is not None or id(module) not in self.names:
            return
        env = _shape_env()
        if env is None:
            return
        n, fixed = before
        specialised = any(k not in fixed for k, v in env.replacements.items() if v.is_number)
        if specialised or any(_fails_in_range(env, g.expr) for g in env.guards[n:]):
            self.culprit = module

    def describe(self) -> str | None:
        if self.culprit is None:
            return None
        return f"{self.names[id(self.culprit)] or '<root>'} ({type(self.culprit).__name__})"


@contextlib.contextmanager
def watch_length(module: torch.nn.Module):
    """Within: a LengthWatch over every forward call of module's submodules."""
    from torch.nn.modules import module as nn_module
    w = LengthWatch({id(m): n for n, m in module.named_modules()})
    handles = [nn_module.register_module_forward_pre_hook(w.pre), nn_module.register_module_forward_hook(w.post)]
    try:
        yield w
    finally:
        for h in handles:
            h.remove()
