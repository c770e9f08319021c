"""Capture follows the forward's signature (capture.forward_inputs): which inputs a graph takes,
and how use_cache is passed, is decided by inspect.signature(model.forward), so a forward that
takes position_ids or use_cache only through **kwargs, or positions as cache_position, exports.
Each toy's positions enter its output (pos * 3), so the graph really reads the input it names.
"""
from __future__ import annotations

import pytest
import torch

from fuselm_capture.capture import export_module, forward_inputs


class KwargsOnly(torch.nn.Module):
    def forward(self, input_ids, **kwargs):
        assert kwargs.get("use_cache") is False
        return input_ids * 2 + kwargs["position_ids"] * 3


class CachePosition(torch.nn.Module):
    def forward(self, input_ids, cache_position=None):
        return input_ids * 2 + cache_position.unsqueeze(0) * 3


class Named(torch.nn.Module):
    def forward(self, input_ids=None, position_ids=None, use_cache=None):
        assert use_cache is False
        return input_ids * 2 + position_ids * 3


class NoPositions(torch.nn.Module):
    def forward(self, input_ids):
        return input_ids * 2


@pytest.mark.parametrize("module, inputs", [
    (KwargsOnly, ["input_ids", "position_ids"]),
    (CachePosition, ["input_ids", "cache_position"]),
    (Named, ["input_ids", "position_ids"]),
    (NoPositions, ["input_ids"]),
])
def test_inputs_follow_the_signature(module, inputs):
    model = module()
    tokens = torch.export.Dim("num_tokens", min=2, max=64)
    example, dynamic = forward_inputs(model, 8, tokens)
    assert list(example) == inputs
    for k in example:  # real tensors: the shim runs eagerly, then exports with T dynamic
        example[k] = torch.zeros_like(example[k], device="cpu") if k == "input_ids" else \
            torch.arange(8).reshape(example[k].shape)
    ep = export_module(model, example, dynamic)
    assert [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"] == inputs
    ids = torch.ones(1, 5, dtype=torch.long)
    run = {"input_ids": ids}
    if len(inputs) == 2:
        run[inputs[1]] = torch.arange(5).reshape((1, 5) if inputs[1] == "position_ids" else (5,))
    want = ids * 2 + (torch.arange(5).unsqueeze(0) * 3 if len(inputs) == 2 else 0)
    assert torch.equal(ep.module()(**run), want)


class BranchesOnAPosition(torch.nn.Module):
    """Branches on a value of its positions with no context to read them at (no config): export fails."""

    def forward(self, input_ids=None, position_ids=None, use_cache=None):
        return input_ids * 2 if bool((position_ids > 3).any()) else input_ids


def test_a_failed_export_is_one_line_not_a_graph(capsys):
    """torch prints its graph (twice) when a guard on a data-dependent value fails; capture drops it."""
    from fuselm_capture.capture import CaptureError
    model = BranchesOnAPosition()
    tokens = torch.export.Dim("num_tokens", min=2, max=64)
    example, dynamic = forward_inputs(model, 8, tokens)
    example = {k: torch.zeros_like(v, device="cpu") for k, v in example.items()}
    with pytest.raises(CaptureError, match="BranchesOnAPosition"):
        export_module(model, example, dynamic)
    out = capsys.readouterr()
    assert "def forward" not in out.out + out.err
