"""The structural rule for experts held as 2-D tensors with every expert's rows (or columns)
stacked end to end (python/fuselm_capture/row_stacked_experts.py): the expert count, the tensors'
roles and the activation are found from the module's own forward on a probe, with no name read.
DBRX, the family that keeps its experts this way, runs in test_moe.py's parity list; these toys
cover the layouts it does not (columns, no gate, a flat output) and the refusals."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fuselm_capture.row_stacked_experts import NotRowStackedExperts, prove_row_stacked

E, I, H = 5, 6, 8


class ColumnExperts(nn.Module):
    """No gate: expert e is relu(x @ A[:, e·I:(e+1)·I]) @ B[:, e·I:(e+1)·I]ᵀ, returned flat [T, H]."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(H, E * I))
        self.b = nn.Parameter(torch.randn(H, E * I))

    def forward(self, hidden, top_k_index, top_k_weights):
        x = hidden.reshape(-1, H)
        out = torch.zeros_like(x)
        for e in range(E):
            rows, slot = torch.where(top_k_index == e)
            if rows.numel() == 0:
                continue
            sl = slice(e * I, (e + 1) * I)
            y = torch.relu(x[rows] @ self.a[:, sl]) @ self.b[:, sl].T
            out.index_add_(0, rows, y * top_k_weights[rows, slot, None])
        return out


class ClampedRowExperts(nn.Module):
    """DBRX's layout, but the activation is clamped: no form the experts op computes."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(E * I, H))
        self.v1 = nn.Parameter(torch.randn(E * I, H))
        self.w2 = nn.Parameter(torch.randn(E * I, H))

    def forward(self, hidden, top_k_index, top_k_weights):
        x = hidden.reshape(-1, H)
        out = torch.zeros_like(x)
        for e in range(E):
            rows, slot = torch.where(top_k_index == e)
            sl = slice(e * I, (e + 1) * I)
            g = torch.nn.functional.silu(x[rows] @ self.w1[sl].T).clamp(max=0.5)
            y = (g * (x[rows] @ self.v1[sl].T)) @ self.w2[sl]
            out.index_add_(0, rows, y * top_k_weights[rows, slot, None])
        return out.view(hidden.shape)


def test_columns_without_a_gate_and_a_flat_output():
    form = prove_row_stacked(ColumnExperts())
    assert form["experts"] == E and form["hidden"] == H
    assert form["activation"] == "relu" and not form["has_gate"] and not form["same_shape"]
    assert [(name, slicing) for name, slicing, _ in form["roles"]] == [("a", "cols"), ("b", "cols")]


def test_a_form_the_experts_op_lacks_is_refused_with_the_reason():
    with pytest.raises(NotRowStackedExperts, match="is not sum_k w_k"):
        prove_row_stacked(ClampedRowExperts())


def test_parameters_that_share_no_widths_are_refused():
    m = ClampedRowExperts()
    m.w2 = nn.Parameter(torch.randn(E * I + 1, H))
    with pytest.raises(NotRowStackedExperts, match="do not share a hidden width"):
        prove_row_stacked(m)
