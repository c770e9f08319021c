"""Capture decomposes the ops the engine lacks into ops it has (python/fuselm_capture/decompose.py)
and refuses, naming the op and its module, an op that no PyTorch decomposition table covers.

The decomposed graph is run by build/fuselm_run_graph (the generic interpreter) and compared with
the module run in torch.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "build" / "fuselm_run_graph"


class RareOps(nn.Module):
    """A block whose activations are ops the engine's registry does not have."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        y = self.proj(x)
        # torch.max(t) / torch.min(t) (whole-tensor, 0-d) as a longrope table choice reads them
        return (F.mish(y) + F.hardsigmoid(y) * torch.logsumexp(y, -1, keepdim=True) + F.leaky_relu(y, 0.1)
                + torch.max(y) - 0.5 * torch.min(x))


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class Sorts(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1, stable=True).values


def test_engine_ops_list_is_read():
    from fuselm_capture.decompose import engine_ops
    ops = engine_ops()
    assert "aten.linear.default" in ops and "aten.mish.default" not in ops


def _capture_case(tmp_path, name: str, model, example: dict, dynamic: dict) -> tuple:
    """(case dir, IR dict, ops it holds) of model captured under tmp_path/cases/name; asserts every
    op it holds is one the engine has."""
    from fuselm_capture.capture import capture_module
    from fuselm_capture.decompose import engine_ops
    case = tmp_path / "cases" / name
    case.mkdir(parents=True)
    capture_module(model, example, dynamic, case / "fuselm-ir")
    ir = json.loads((case / "fuselm-ir" / "ir.json").read_text())
    held = {n["op"] for n in ir["nodes"]} - {"placeholder"}
    assert held <= engine_ops(), f"ops the engine lacks are left: {sorted(held - engine_ops())}"
    return case, ir, held


def test_missing_ops_are_decomposed_and_run_as_torch(tmp_path):
    from safetensors.torch import load_file, save_file
    torch.manual_seed(0)
    model = Wrap(RareOps()).eval()
    t = torch.export.Dim("num_tokens", min=2, max=64)
    case, ir, held = _capture_case(tmp_path, "rare", model, {"x": torch.randn(1, 5, 6)}, {"x": {1: t}})
    assert "aten.linear.default" in held, "ops the engine has were decomposed too"
    # The module's weights are graph parameters; the runner takes every tensor as an input.
    x = torch.randn(1, 9, 6)
    inputs = {"x": x}
    for n in ir["nodes"]:
        if n["op"] == "placeholder" and n["kind"] == "parameter":
            n["kind"] = "input"
            inputs[n["target"]] = model.state_dict()[n["target"]]
    (case / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(case / "inputs.safetensors"))
    subprocess.run([str(RUNNER), str(tmp_path / "cases")], check=True, capture_output=True, timeout=300)
    assert not (case / "error.txt").exists(), (case / "error.txt").read_text()
    got = load_file(str(case / "outputs.safetensors"))["out0"]
    with torch.no_grad():
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), float((got - want).abs().max())


def test_op_without_decomposition_is_refused_naming_op_and_module(tmp_path):
    from fuselm_capture.capture import CaptureError, capture_module
    with pytest.raises(CaptureError) as err:
        capture_module(Wrap(Sorts()).eval(), {"x": torch.randn(2, 5)}, {"x": None}, tmp_path / "ir")
    msg = str(err.value)
    assert "aten.sort" in msg and "inner (Sorts)" in msg, msg
    assert not (tmp_path / "ir" / "ir.json").exists()


class Indexing(nn.Module):
    """aten.index.Tensor as models write it: a table read at a 2-D index tensor (rotary tables
    read at position_ids), and two adjacent index tensors with negative entries."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(16, 6))
        self.register_buffer("rows", torch.tensor([[0, -1], [2, 3]]), persistent=False)
        self.register_buffer("cols", torch.tensor([1, -2]), persistent=False)

    def forward(self, x, positions):
        a = self.table[positions]  # [1, S, 6]
        b = x[:, self.rows, self.cols]  # x [1, S, 4, 6]: index on axes 1, 2 -> [1, 2, 2, 6]
        return a.sum(-1, keepdim=True) + b.sum(dim=(1, 2)).unsqueeze(1)


class Wrap2(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, positions):
        return self.inner(x, positions)


def test_index_tensor_on_adjacent_axes_runs_as_torch(tmp_path):
    from safetensors.torch import load_file, save_file
    from fuselm_capture.capture import capture_module
    from fuselm_capture.decompose import engine_ops
    model = Wrap2(Indexing()).eval()
    t = torch.export.Dim("num_tokens", min=5, max=64)
    case = tmp_path / "cases" / "index"
    case.mkdir(parents=True)
    capture_module(model, {"x": torch.randn(1, 6, 4, 6), "positions": torch.arange(6).unsqueeze(0)},
                   {"x": {1: t}, "positions": {1: t}}, case / "fuselm-ir")
    ir = json.loads((case / "fuselm-ir" / "ir.json").read_text())
    held = {n["op"] for n in ir["nodes"]} - {"placeholder"}
    assert "aten.index.Tensor" not in held and held <= engine_ops(), sorted(held - engine_ops())
    x, pos = torch.randn(1, 9, 4, 6), torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5]])
    inputs = {"x": x, "positions": pos}
    for n in ir["nodes"]:
        if n["op"] == "placeholder" and n["kind"] in ("parameter", "buffer", "constant"):
            n["kind"] = "input"
            inputs[n["target"]] = getattr(model.inner, n["target"].split(".")[-1])
    (case / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(case / "inputs.safetensors"))
    subprocess.run([str(RUNNER), str(tmp_path / "cases")], check=True, capture_output=True, timeout=300)
    assert not (case / "error.txt").exists(), (case / "error.txt").read_text()
    got = load_file(str(case / "outputs.safetensors"))["out0"]
    with torch.no_grad():
        want = model(x, pos)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


class UnweightedRmsNorm(nn.Module):
    """F.rms_norm with no weight (an RMSNorm without elementwise affine: aten.rms_norm stays in the
    graph, since only weighted RMSNorms are fused) and one with a weight and no eps."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(6, eps=1e-5, elementwise_affine=False)
        self.affine = nn.RMSNorm(6)

    def forward(self, x):
        return self.norm(x) + 2 * self.affine(x * 3)


def _run_case(tmp_path, case, ir: dict, inputs: dict) -> torch.Tensor:
    """Writes ir (its weights and constants made graph inputs by the caller) and inputs into case,
    runs build/fuselm_run_graph over tmp_path/cases and returns the graph's first output."""
    from safetensors.torch import load_file, save_file
    (case / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(case / "inputs.safetensors"))
    subprocess.run([str(RUNNER), str(tmp_path / "cases")], check=True, capture_output=True, timeout=300)
    assert not (case / "error.txt").exists(), (case / "error.txt").read_text()
    return load_file(str(case / "outputs.safetensors"))["out0"]


def test_rms_norm_without_weight_runs_as_torch(tmp_path):
    from fuselm_capture.capture import capture_module
    torch.manual_seed(0)
    model = Wrap(UnweightedRmsNorm()).eval()
    with torch.no_grad():
        model.inner.affine.weight.normal_()
    t = torch.export.Dim("num_tokens", min=2, max=64)
    case = tmp_path / "cases" / "rms"
    case.mkdir(parents=True)
    capture_module(model, {"x": torch.randn(1, 5, 6)}, {"x": {1: t}}, case / "fuselm-ir")
    ir = json.loads((case / "fuselm-ir" / "ir.json").read_text())
    assert "aten.rms_norm.default" not in {n["op"] for n in ir["nodes"]}
    x = torch.randn(1, 9, 6)
    inputs = {"x": x}
    for n in ir["nodes"]:
        if n["op"] == "placeholder" and n["kind"] == "parameter":
            n["kind"] = "input"
            inputs[n["target"]] = model.state_dict()[n["target"]]
    got = _run_case(tmp_path, case, ir, inputs)
    with torch.no_grad():
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


class StatsAndSliceWrite(nn.Module):
    """Gemma 3n's Gaussian top-k in general form: torch.std / torch.var over the last dim, a cut-off
    from torch.distributions' Normal.icdf (broadcast_tensors, erfinv) of a constant made in forward,
    torch.multiply (an alias whose own definition re-traced under the table recursed), and an
    in-place add into a slice, which a decomposing re-trace turns into slice_scatter and copy."""

    def forward(self, x):
        std = torch.std(x, dim=-1, keepdim=True, unbiased=False)
        cut = torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(0.9, device=x.device))
        y = torch.relu(x - (x.mean(-1, keepdim=True) + std * cut))
        y = torch.multiply(y, torch.var(x, dim=-1, keepdim=True))
        out = torch.stack([y, x, x * 2])
        out[1:] += y
        return out


def test_statistics_and_a_slice_write_run_as_torch(tmp_path):
    from safetensors.torch import load_file
    model = Wrap(StatsAndSliceWrite()).eval()
    t = torch.export.Dim("num_tokens", min=2, max=64)
    case, ir, held = _capture_case(tmp_path, "stats", model, {"x": torch.randn(1, 5, 6)}, {"x": {1: t}})
    assert "aten.erfinv.default" in held
    x = torch.randn(1, 9, 6)
    inputs = {"x": x}
    constants = load_file(str(case / "fuselm-ir" / "constants.safetensors"))  # 0.9, and Normal's 0 and 1
    for n in ir["nodes"]:
        if n["op"] == "placeholder" and n["kind"] == "constant":
            n["kind"] = "input"
            inputs[n["target"]] = constants[n["target"]]
    got = _run_case(tmp_path, case, ir, inputs)
    with torch.no_grad():
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


class BranchesOnLength(nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[1] == 3 else x + 1


def test_a_forward_that_branches_on_the_token_count_is_refused_with_its_guard(tmp_path):
    """torch.export's own first line ("Constraints violated (num_tokens)!") names no cause; capture's
    error carries the guard that specialised the token count."""
    from fuselm_capture.capture import CaptureError, capture_module
    t = torch.export.Dim("num_tokens", min=2, max=64)
    with pytest.raises(CaptureError) as err:
        capture_module(Wrap(BranchesOnLength()).eval(), {"x": torch.randn(1, 5, 6)}, {"x": {1: t}}, tmp_path / "ir")
    msg = str(err.value)
    assert "Constraints violated (num_tokens)" in msg and "satisfy the generated guard" in msg, msg
    assert "!= 3" in msg and "cannot serve every length" in msg, msg


class RouterScatter(nn.Module):
    """aten.scatter.src as a top-k router writes it (a -inf table filled at the chosen experts)
    and aten.log1p over tiny, moderate and large values (a plain log(1 + x) loses the tiny ones)."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(6, 8)

    def forward(self, x):
        logits = self.router(x)  # [1, S, 8]
        top, idx = torch.topk(logits, 2, dim=-1)
        scores = torch.full_like(logits, float("-inf")).scatter(-1, idx, top)
        small = torch.log1p(logits.abs() * 1e-7) * 1e7
        return torch.softmax(scores, -1) + torch.log1p(logits.abs() * 4) + small


def test_scatter_src_and_log1p_run_as_torch(tmp_path):
    from safetensors.torch import load_file, save_file
    from fuselm_capture.capture import capture_module
    from fuselm_capture.decompose import engine_ops
    torch.manual_seed(0)
    model = Wrap(RouterScatter()).eval()
    t = torch.export.Dim("num_tokens", min=2, max=64)
    case = tmp_path / "cases" / "scatter"
    case.mkdir(parents=True)
    capture_module(model, {"x": torch.randn(1, 5, 6)}, {"x": {1: t}}, case / "fuselm-ir")
    ir = json.loads((case / "fuselm-ir" / "ir.json").read_text())
    held = {n["op"] for n in ir["nodes"]} - {"placeholder"}
    assert {"aten.scatter.src", "aten.log1p.default"}.isdisjoint(held) and held <= engine_ops(), \
        sorted(held - engine_ops())
    x = torch.randn(1, 11, 6)
    inputs = {"x": x}
    for n in ir["nodes"]:
        if n["op"] == "placeholder" and n["kind"] == "parameter":
            n["kind"] = "input"
            inputs[n["target"]] = model.state_dict()[n["target"]]
    (case / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(case / "inputs.safetensors"))
    subprocess.run([str(RUNNER), str(tmp_path / "cases")], check=True, capture_output=True, timeout=300)
    assert not (case / "error.txt").exists(), (case / "error.txt").read_text()
    got = load_file(str(case / "outputs.safetensors"))["out0"]
    with torch.no_grad():
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())


def test_scatter_src_decomposition_keeps_the_last_repeated_index():
    """CPU torch writes repeated indices in order (the last wins); the decomposition agrees."""
    from fuselm_capture.decompose import _scatter_src
    x = torch.randn(5, 4)
    idx = torch.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3], [2, 0, 1], [0, 1, 2]])
    src = torch.randn(5, 3)
    assert torch.equal(_scatter_src(x, 1, idx, src), x.scatter(1, idx, src))
    assert torch.equal(_scatter_src(x.t(), 0, idx.t(), src.t()), x.t().scatter(0, idx.t(), src.t()))
