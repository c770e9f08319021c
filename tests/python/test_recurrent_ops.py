"""The stateful ops (docs/recurrent.md) against transformers' own torch fallbacks.

Each op is captured in a tiny nn.Module whose forward calls torch.ops.fuselm.<op> (capture_module,
the token count dynamic), run by build/fuselm_run_graph (one sequence owning a state slot) and
compared with the torch fallback of the dispatch point it replaces, imported from the transformers
model file that defines it: causal_conv1d_fn (mamba2), mamba2_chunk_scan, mamba_selective_scan,
torch_chunk_gated_delta_rule (qwen3_next) and chunk_kimi_delta_attention (kimi_linear). Random
inputs, T = 1, 7, 63, 64, 65, 300; each also fed in chunks of 64 and one token at a time (decode),
the state carried by the engine, which must give the fallback's output on the whole sequence.
"""
from __future__ import annotations

import inspect
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "build" / "fuselm_run_graph"
LENGTHS = (1, 7, 63, 64, 65, 300)
MODES = {"whole": 0, "chunks64": 64, "decode": 1}  # tokens per run (0: all at once)


def _fallback(module: str, name: str):
    """The torch function under transformers' hub-kernel decorator."""
    import importlib
    return inspect.unwrap(getattr(importlib.import_module(f"transformers.models.{module}"), name))


class Call(nn.Module):
    """forward(i0, i1, ...) = fn(i0, i1, ...)."""

    def __init__(self, fn, n):
        super().__init__()
        self.fn = fn
        ns = {}
        names = ", ".join(f"i{k}" for k in range(n))
        exec(f"def forward(self, {names}):\n    return self.fn({names})\n", ns)  # noqa: S102 - n names
        self.forward = ns["forward"].__get__(self)


def _run(tmp: Path, fn, make_inputs, token_dims: dict[int, int], lengths=LENGTHS) -> dict:
    """Captures fn on inputs of 8 tokens (token_dims: input index -> its token dim, marked
    dynamic), runs it for every length and mode; returns {(T, mode): output or error text}."""
    from safetensors.torch import load_file, save_file
    from fuselm_capture import recurrent_ops  # noqa: F401  (registers torch.ops.fuselm.*)
    from fuselm_capture.capture import capture_module
    example = make_inputs(8)
    tdim = torch.export.Dim("t", min=1, max=4096)
    dyn = {f"i{j}": ({token_dims[j]: tdim} if j in token_dims else None) for j in range(len(example))}
    ir = tmp / "ir"
    capture_module(Call(fn, len(example)).eval(), {f"i{j}": t for j, t in enumerate(example)}, dyn, ir)
    cases, inputs = {}, {}
    for T in lengths:
        inputs[T] = make_inputs(T)
        for mode, chunk in MODES.items():
            d = tmp / "cases" / f"{T}-{mode}"
            shutil.copytree(ir, d / "fuselm-ir")
            save_file({f"i{j}": t.contiguous() for j, t in enumerate(inputs[T])}, str(d / "inputs.safetensors"))
            if chunk:
                (d / "chunk.txt").write_text(str(chunk))
            cases[(T, mode)] = d
    subprocess.run([str(RUNNER), str(tmp / "cases")], capture_output=True, text=True, check=True, timeout=600)
    out = {}
    for key, d in cases.items():
        err = d / "error.txt"
        out[key] = err.read_text().strip() if err.exists() else load_file(str(d / "outputs.safetensors"))["out0"]
    return {"got": out, "inputs": inputs}


def _check(res, ref, rtol=1e-4, atol=1e-4):
    failures = []
    for (T, mode), got in res["got"].items():
        if isinstance(got, str):
            failures.append(f"T={T} {mode}: {got}")
            continue
        want = ref(*[t.clone() for t in res["inputs"][T]])
        if tuple(got.shape) != tuple(want.shape):
            failures.append(f"T={T} {mode}: shape {tuple(got.shape)}, transformers {tuple(want.shape)}")
        elif not torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol):
            failures.append(f"T={T} {mode}: max abs diff {float((got.double() - want.double()).abs().max()):.3g}")
    assert not failures, "\n".join(failures)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module", autouse=True)
def _runner():
    assert RUNNER.exists(), f"{RUNNER} is missing: build first (ninja -C build)"


# ---- causal conv1d ------------------------------------------------------------------------------

@pytest.mark.parametrize("activation,bias", [("silu", True), ("none", False)])
def test_causal_conv1d(tmp_path, activation, bias):
    C, K = 10, 4
    fallback = _fallback("mamba2.modeling_mamba2", "causal_conv1d_fn")

    def make(T):
        g = _gen(T)
        ins = [torch.randn(1, T, C, generator=g), torch.randn(C, K, generator=g)]
        return ins + [torch.randn(C, generator=g)] if bias else ins

    def fn(xt, w, *b):  # x [1, C, T] as the transposed view models pass
        return torch.ops.fuselm.causal_conv1d(xt.transpose(1, 2), w, b[0] if b else None, activation, 0)

    def ref(xt, w, *b):
        return fallback(xt.transpose(1, 2), w, b[0] if b else None, None if activation == "none" else activation)

    _check(_run(tmp_path, fn, make, {0: 1}), ref)


# ---- Mamba2 SSD ----------------------------------------------------------------------------------

@pytest.mark.parametrize("H,G,with_d", [(4, 2, True), (3, 1, False)])
def test_ssd_scan(tmp_path, H, G, with_d):
    P, N = 6, 20
    dt_min, dt_max = (0.001, 0.1) if with_d else (0.0, math.inf)
    fallback = _fallback("mamba2.modeling_mamba2", "mamba2_chunk_scan")

    def make(T):
        g = _gen(100 + T)
        ins = [torch.randn(1, T, H, P, generator=g), torch.randn(1, T, H, generator=g) - 1.0,
               -torch.rand(H, generator=g) * 2 - 0.1, torch.randn(1, T, G, N, generator=g),
               torch.randn(1, T, G, N, generator=g)]
        return ins + ([torch.randn(H, generator=g), torch.randn(H, generator=g) * 0.5] if with_d else [])

    def fn(x, dt, A, B, C, *dd):
        D, dt_bias = dd if dd else (None, None)
        return torch.ops.fuselm.ssd_scan(x, dt, A, B, C, D, dt_bias, True, dt_min, dt_max, 3)

    def ref(x, dt, A, B, C, *dd):
        D, dt_bias = dd if dd else (None, None)
        return fallback(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True, dt_limit=(dt_min, dt_max))

    _check(_run(tmp_path, fn, make, {0: 1, 1: 1, 3: 1, 4: 1}), ref)


# ---- Mamba(1) selective scan -------------------------------------------------------------------

@pytest.mark.parametrize("groups,extras", [(0, True), (2, False)])
def test_selective_scan(tmp_path, groups, extras):
    """groups 0: B, C [1, N, T] (as the transposed [1, T, N] views Mamba passes); else [1, G, N, T]."""
    Dm, N = 12, 5
    fallback = _fallback("mamba.modeling_mamba", "mamba_selective_scan")

    def make(T):
        g = _gen(200 + T)
        bc = (1, T, N) if not groups else (1, groups, N, T)
        ins = [torch.randn(1, Dm, T, generator=g), torch.randn(1, Dm, T, generator=g) - 1.0,
               -torch.rand(Dm, N, generator=g) * 2 - 0.1, torch.randn(*bc, generator=g), torch.randn(*bc, generator=g)]
        if extras:
            ins += [torch.randn(Dm, generator=g), torch.randn(1, Dm, T, generator=g), torch.randn(Dm, generator=g)]
        return ins

    def fn(x, dt, A, B, C, *e):
        if not groups:
            B, C = B.transpose(1, 2), C.transpose(1, 2)
        D, z, bias = e if e else (None, None, None)
        return torch.ops.fuselm.selective_scan(x, dt, A, B, C, D, z, bias, True, 1)

    def ref(x, dt, A, B, C, *e):
        D, z, bias = e if e else (None, None, None)
        if not groups:
            return fallback(x, dt, A, B.transpose(1, 2), C.transpose(1, 2), D, z, bias, True)
        per = Dm // groups  # channel d reads group d // per: the fallback on each group's channels
        parts = [fallback(x[:, s], dt[:, s], A[s], B[:, j], C[:, j], None if D is None else D[s],
                          None if z is None else z[:, s], None if bias is None else bias[s], True)
                 for j in range(groups) for s in [slice(j * per, (j + 1) * per)]]
        return torch.cat(parts, dim=1)

    token_dims = {0: 2, 1: 2, 3: 1 if not groups else 3, 4: 1 if not groups else 3}
    if extras:
        token_dims[6] = 2
    _check(_run(tmp_path, fn, make, token_dims), ref)


# ---- gated delta rule ---------------------------------------------------------------------------

@pytest.mark.parametrize("Hk,Hv,Dk,Dv,l2norm", [(2, 4, 16, 12, True), (3, 3, 8, 20, False)])
def test_gated_delta_rule(tmp_path, Hk, Hv, Dk, Dv, l2norm):
    fallback = _fallback("qwen3_next.modeling_qwen3_next", "torch_chunk_gated_delta_rule")

    def make(T):
        g = _gen(300 + T)
        q, k = torch.randn(1, T, Hk, Dk, generator=g), torch.randn(1, T, Hk, Dk, generator=g)
        if not l2norm:  # unnormalised keys must keep the delta rule stable: |k|^2 <= 2/beta
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1) * 0.9
        return [q, k, torch.randn(1, T, Hv, Dv, generator=g), -F.softplus(torch.randn(1, T, Hv, generator=g)),
                torch.rand(1, T, Hv, generator=g)]

    def fn(q, k, v, gg, beta):
        return torch.ops.fuselm.gated_delta_rule(q, k, v, gg, beta, l2norm, 0)

    def ref(q, k, v, gg, beta):
        r = Hv // Hk
        q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        return fallback(q, k, v, gg, beta, chunk_size=64, use_qk_l2norm_in_kernel=l2norm)[0]

    _check(_run(tmp_path, fn, make, {j: 1 for j in range(5)}), ref)


@pytest.mark.parametrize("decay", [0.3, 3.0])
def test_kimi_delta_attention(tmp_path, decay):
    """Per-key-channel decay g [1, T, H, Dk] (chunk_kda); decay 3: strong enough that the engine's
    chunks take the decayed products pair by pair instead of factored."""
    H, Dk, Dv = 2, 12, 8
    fallback = _fallback("kimi_linear.modeling_kimi_linear", "chunk_kimi_delta_attention")

    def make(T):
        g = _gen(400 + T)
        return [torch.randn(1, T, H, Dk, generator=g), torch.randn(1, T, H, Dk, generator=g),
                torch.randn(1, T, H, Dv, generator=g), -F.softplus(torch.randn(1, T, H, Dk, generator=g)) * decay,
                torch.rand(1, T, H, generator=g)]

    def fn(q, k, v, gg, beta):
        return torch.ops.fuselm.gated_delta_rule(q, k, v, gg, beta, True, 0)

    def ref(q, k, v, gg, beta):
        return fallback(q, k, v, gg, beta, chunk_size=64, use_qk_l2norm_in_kernel=True)[0]

    _check(_run(tmp_path, fn, make, {j: 1 for j in range(5)}), ref)

