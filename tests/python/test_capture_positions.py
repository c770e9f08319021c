"""Capture's rules on the token count (python/fuselm_capture/range_guards.py, step_positions.py):
a shape guard true at every length of the range does not refuse the export; float data computed
from arange(T) (the step's positions counted from 0) is refused, naming the op and module; an
arange(T) used as an index is not."""
from __future__ import annotations

import pytest
import torch
from torch import nn


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class GuardTrueEverywhere(nn.Module):
    """A range check torch's value ranges cannot decide: T * min(64, 64 T) == 64 T for every T >= 1."""

    def forward(self, x):
        t = x.shape[1]
        return x * 2 if t * min(64, 64 * t) == 64 * t else x + 1


class GuardFalseSomewhere(nn.Module):
    """The same form, false at T = 64 (min(4096, 64 T) != 64 T there): a real specialisation."""

    def forward(self, x):
        t = x.shape[1]
        return x * 2 if t * min(4096, 64 * t) == 64 * t * t else x + 1


class StepTemperature(nn.Module):
    """A position-dependent scale computed from arange(T), as attention temperature tuning does."""

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device)
        return x * torch.log1p(torch.floor((pos.float() + 1.0) / 4.0)).view(1, -1, 1)


class StepIndex(nn.Module):
    """arange(T) as row indices (a router's gather): an index, not a value."""

    def forward(self, x):
        rows = torch.arange(x.shape[1], device=x.device)
        return x[:, rows] * 3


def _capture(module, tmp_path, lo=2, hi=512):
    from fuselm_capture.capture import capture_module
    t = torch.export.Dim("num_tokens", min=lo, max=hi)
    return capture_module(Wrap(module).eval(), {"x": torch.randn(1, 5, 6)}, {"x": {1: t}}, tmp_path / "ir")


def test_guard_true_at_every_length_is_dropped(tmp_path):
    assert _capture(GuardTrueEverywhere(), tmp_path).exists()


def test_guard_false_at_some_length_still_refuses(tmp_path):
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError, match="Constraints violated"):
        _capture(GuardFalseSomewhere(), tmp_path)


def test_holds_everywhere_evaluates_the_whole_range():
    import sympy
    from torch.utils._sympy.value_ranges import ValueRanges
    from fuselm_capture.range_guards import holds_everywhere
    t = sympy.Symbol("s0", integer=True)  # no sign assumption: sympy would decide the Min itself
    rng = {t: ValueRanges(2, 1000)}
    assert holds_everywhere(sympy.Eq(t * sympy.Min(64, 64 * t), 64 * t), rng)
    assert not holds_everywhere(sympy.Ne(t, 777), rng)  # false at one length only
    from torch.utils._sympy.numbers import int_oo
    assert not holds_everywhere(sympy.Ne(t, 777), {t: ValueRanges(2, int_oo)})  # unbounded: not proved


def test_float_data_from_step_positions_is_refused(tmp_path):
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        _capture(StepTemperature(), tmp_path)
    msg = str(err.value)
    assert "inner (StepTemperature)" in msg and "positions counted from 0" in msg, msg
    assert not (tmp_path / "ir" / "ir.json").exists()


def test_step_positions_as_an_index_are_captured(tmp_path):
    assert _capture(StepIndex(), tmp_path).exists()
