"""Capture's rules on the token count (python/fuselm_capture/range_guards.py, step_positions.py):
a shape guard true at every length of the range does not refuse the export; float data computed
from arange(T) (the step's positions counted from 0) reads the position input instead (the
rewritten graph, run by torch at positions that do not start at 0, equals the module at those
absolute positions), and is refused, naming the op and module, where the graph has no position
input, the arange is also an index, or its values also derive from the position input; an arange(T)
used only as an index is kept."""
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


class TemperatureBeside(nn.Module):
    """StepTemperature in a graph with a position input; `mixed` also indexes with the arange,
    `offset` adds the position input to it (the rewrite would count it twice)."""

    def __init__(self, variant=""):
        super().__init__()
        self.variant = variant

    def forward(self, x, position_ids):
        pos = torch.arange(x.shape[1], device=x.device)
        if self.variant == "offset":
            pos = pos + position_ids[0]
        scale = torch.log1p(torch.floor((pos.float() + 1.0) / 4.0)).view(1, -1, 1)
        y = x * scale + position_ids.unsqueeze(-1).float() * 0.0
        return y[:, pos] if self.variant == "mixed" else y


def _export_with_positions(module):
    t = torch.export.Dim("num_tokens", min=2, max=512)
    ep = torch.export.export(module, (torch.randn(1, 5, 6), torch.arange(5).unsqueeze(0)),
                             dynamic_shapes=({1: t}, {1: t}), strict=False)
    positions = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "position_ids")
    return ep, positions


def test_float_data_from_step_positions_reads_the_position_input():
    from fuselm_capture.step_positions import substitute_step_positions
    ep, positions = _export_with_positions(TemperatureBeside())
    done = substitute_step_positions(ep.graph, positions)
    assert len(done) == 1 and "(TemperatureBeside)" in done[0], done
    ep.graph_module.recompile()
    assert not any("arange" in str(n.target) for n in ep.graph.nodes)
    x, absolute = torch.randn(1, 3, 6), torch.arange(10, 13).unsqueeze(0)  # a decode-like step at 10..12
    got = ep.graph_module(x, absolute)[0]
    want = x * torch.log1p(torch.floor((absolute[0].float() + 1.0) / 4.0)).view(1, -1, 1)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, TemperatureBeside()(x, absolute))  # the module itself restarts at 0


@pytest.mark.parametrize("variant,why", [("mixed", "also reads it as an index"),
                                         ("offset", "also derive from the position input")])
def test_step_positions_that_cannot_be_replaced_are_refused(variant, why):
    from fuselm_capture.step_positions import StepPositionsRefused, substitute_step_positions
    ep, positions = _export_with_positions(TemperatureBeside(variant))
    with pytest.raises(StepPositionsRefused, match=why):
        substitute_step_positions(ep.graph, positions)
