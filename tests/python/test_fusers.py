"""Fusers, end to end: toy nn.Modules captured through the normal capture path (capture_module),
saved with their state_dict as a safetensors checkpoint, and checked with `fuselm inspect --json`:
each fuser's positive and negative cases, fused vs unfused logits on tiny real families, and name
blindness (a toy LM renamed alpha, beta, ... gets the same fusions and the same logits).
"""
from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import fuselm_runner
import long_mode
import toy_lm
import tiny_models

H, I = 32, 64


# ---------------------------------------------------------------- capture helpers

def capture_toy(module: nn.Module, out_dir: Path, extra_inputs: tuple[str, ...] = ()) -> Path:
    """Captures module(x [1, T, H], *extra) with T dynamic; writes the checkpoint next to the IR."""
    from safetensors.torch import save_file
    from fuselm_capture.capture import capture_module
    torch.manual_seed(0)
    module = module.eval()
    t = torch.export.Dim("num_tokens", min=2, max=4096)
    kwargs = {"x": torch.randn(1, 8, H)}
    shapes = {"x": {1: t}}
    for name in extra_inputs:
        kwargs[name] = torch.randn(1, 8, H)
        shapes[name] = {1: t}
    out_dir.mkdir(parents=True, exist_ok=True)
    capture_module(module, kwargs, shapes, out_dir / "fuselm-ir")
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(out_dir / "model.safetensors"))
    return out_dir


def inspect(fuselm_bin, model_dir: Path, *extra: str, ok: bool = True) -> dict:
    proc = subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--json", *extra], capture_output=True,
                          text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    report["returncode"] = proc.returncode
    return report


def entry(report: dict, module: str, fuser: str) -> dict | None:
    return next((e for e in report["modules"] if e["module"] == module and e["fuser"] == fuser), None)


class Wrap(nn.Module):
    """A toy root holding one block under the name `block`."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, gate=None):
        return self.block(x) if gate is None else self.block(x, gate)


# ---------------------------------------------------------------- RMSNorm variants

class RmsLlama(nn.Module):  # fp32 upcast, cast back before the weight
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H) + 0.1 * torch.randn(H))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dt)


class RmsGemma(nn.Module):  # (1 + w), cast after the weight
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(0.1 * torch.randn(H))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (y * (1.0 + self.weight.float())).type_as(x)


class RmsNoWeight(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5)


class RmsNoCast(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(H))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 3e-5) * self.w


class RmsPow(nn.Module):  # Gemma 3n / 4: pow(·, -0.5) for rsqrt (capture's canonical.py rewrites it)
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H) + 0.1 * torch.randn(H))

    def forward(self, x):
        y = x.float()
        y = y * torch.pow(y.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5)
        return (y * self.weight.float()).type_as(x)


class HandLayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))
        self.bias = nn.Parameter(torch.zeros(H))

    def forward(self, x):
        xc = x - x.mean(-1, keepdim=True)
        return xc * torch.rsqrt((xc * xc).mean(-1, keepdim=True) + 1e-5) * self.weight + self.bias


class GatedRmsBefore(nn.Module):  # Mamba2-style: x · silu(gate), then the norm
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x, gate):
        x = x * F.silu(gate)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class GatedRmsAfter(nn.Module):  # Qwen3-Next-style: the norm, then · silu(gate)
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x, gate):
        y = self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        return y * F.silu(gate)


@pytest.mark.parametrize("cls,weight", [(RmsLlama, "weight=w"), (RmsGemma, "weight=1+w"),
                                        (RmsNoWeight, "weight=none"), (RmsNoCast, "weight=w"),
                                        (RmsPow, "weight=w")])
def test_rms_norm_variants_fuse(cls, weight, fuselm_bin, tmp_path):
    d = capture_toy(Wrap(cls()), tmp_path / cls.__name__)
    e = entry(inspect(fuselm_bin, d), "block", "rms_norm")
    assert e and e["status"] == "fused", e
    assert weight in e["detail"] and f"width={H}" in e["detail"]


class TwoRms(nn.Module):  # one class and structure, two eps: eps is read per instance
    def __init__(self):
        super().__init__()
        self.a, self.b = RmsLlama(1e-6), RmsLlama(1e-3)

    def forward(self, x):
        return self.b(self.a(x))


def test_rms_norm_eps_is_per_instance(fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(TwoRms(), tmp_path / "two"))
    assert "eps=1e-06" in entry(r, "a", "rms_norm")["detail"]
    assert "eps=0.001" in entry(r, "b", "rms_norm")["detail"]


@pytest.mark.parametrize("cls,reason,inputs", [
    (HandLayerNorm, "LayerNorm", ()),
    (GatedRmsBefore, "not a plain RMSNorm", ("gate",)),
    (GatedRmsAfter, "not a plain RMSNorm", ("gate",)),
])
def test_rms_norm_rejects(cls, reason, inputs, fuselm_bin, tmp_path):
    d = capture_toy(Wrap(cls()), tmp_path / cls.__name__, inputs)
    e = entry(inspect(fuselm_bin, d), "block", "rms_norm")
    assert e and e["status"] == "rejected" and reason in e["detail"], e


def test_torch_layer_norm_is_not_a_candidate(fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(nn.LayerNorm(H)), tmp_path / "ln"))
    assert r["totals"]["rms_norm"]["applied"] == 0


# ---------------------------------------------------------------- GLU variants

class Glu(nn.Module):
    def __init__(self, act="silu", reverse=False, down=True, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=bias)
        self.up_proj = nn.Linear(H, I, bias=bias)
        self.down_proj = nn.Linear(I, H, bias=False) if down else None
        self.act, self.reverse = act, reverse

    def forward(self, x):
        g = self.gate_proj(x)
        if self.act == "silu":
            a = F.silu(g)
        elif self.act == "gelu":
            a = F.gelu(g)
        elif self.act == "gelu_tanh":
            a = F.gelu(g, approximate="tanh")
        else:
            a = F.dropout(g, 0.1, training=False) if self.act == "dropout" else g
        u = self.up_proj(x)
        y = u * a if self.reverse else a * u
        return self.down_proj(y) if self.down_proj is not None else y


class GluConv1D(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers.pytorch_utils import Conv1D
        self.c_gate, self.c_up, self.c_down = Conv1D(I, H), Conv1D(I, H), Conv1D(H, I)
        for c in (self.c_gate, self.c_up, self.c_down):
            nn.init.normal_(c.weight, std=0.1)
            nn.init.normal_(c.bias, std=0.1)

    def forward(self, x):
        return self.c_down(F.silu(self.c_gate(x)) * self.c_up(x))


class PlainMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = nn.Linear(H, I), nn.Linear(I, H)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


@pytest.mark.parametrize("name,module,detail", [
    ("silu", lambda: Glu(), "act=silu down=yes"),
    ("reversed", lambda: Glu(reverse=True), "act=silu down=yes"),
    ("no_down", lambda: Glu(down=False), "act=silu down=no"),
    ("gelu", lambda: Glu(act="gelu"), "act=gelu down=yes"),
    ("gelu_tanh", lambda: Glu(act="gelu_tanh", bias=True), "act=gelu_tanh down=yes"),
    ("conv1d", lambda: GluConv1D(), "conv1d"),
])
def test_glu_variants_fuse(name, module, detail, fuselm_bin, tmp_path):
    d = capture_toy(Wrap(module()), tmp_path / name)
    e = entry(inspect(fuselm_bin, d), "block", "glu")
    assert e and e["status"] == "fused", e
    assert detail in e["detail"] and f"rows=2x{I}" in e["detail"]


@pytest.mark.parametrize("name,module,reason", [
    ("dropout", lambda: Glu(act="dropout"), "not an activation"),
    ("bilinear", lambda: Glu(act="none"), "bilinear"),
    ("plain", lambda: PlainMlp(), "plain MLP"),
])
def test_glu_rejects(name, module, reason, fuselm_bin, tmp_path):
    d = capture_toy(Wrap(module()), tmp_path / name)
    r = inspect(fuselm_bin, d)
    e = entry(r, "block", "glu")
    assert e and e["status"] == "rejected" and reason in e["detail"], r["modules"]
    assert r["totals"]["glu"]["applied"] == 0


def test_disable_fuser(fuselm_bin, tmp_path):
    d = capture_toy(Wrap(Glu()), tmp_path / "glu")
    r = inspect(fuselm_bin, d, "--disable-fuser", "glu")
    assert "glu" in r["disabled"] and entry(r, "block", "glu") is None
    r = inspect(fuselm_bin, d, "--no-fuse")
    assert set(r["disabled"]) >= {"glu", "rms_norm", "attention"}
    proc = subprocess.run([str(fuselm_bin), "inspect", str(d), "--disable-fuser", "nope"], capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown fuser 'nope'" in proc.stderr


# ---------------------------------------------------------------- rotary embedding

def rotate_half(x):  # transformers' rotate_half (models/llama/modeling_llama.py)
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)


def rotate_every_two(x):  # transformers' GPT-J rotate_every_two (models/gptj/modeling_gptj.py)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class Rope(nn.Module):
    """q and k of 4 heads of 8 rotated by an in-module cos/sin table (whose own cat([f, f]) is no
    candidate). variant: half (Llama), reversed (cos · x + sin · rotate_half(x)), partial (the first
    4 of 8 rotated, the rest passed through: Phi, GPT-NeoX), wrong_half (the lower half negated:
    not rotate_half), bf16 (the rope computed in bf16, which torch rounds per product), interleaved
    (GPT-J's rotate_every_two with cos/sin repeated per pair)."""

    def __init__(self, variant="half"):
        super().__init__()
        self.variant = variant
        self.q_proj, self.k_proj = nn.Linear(H, H, bias=False), nn.Linear(H, H, bias=False)
        # Positions as a table sliced to the length, not arange(T): capture refuses float data
        # computed from an arange of the token count (step_positions.py); these toys only show the
        # fuser its pattern, the table's values do not matter.
        self.register_buffer("positions", torch.arange(4096, dtype=torch.float32), persistent=False)

    def rotate(self, x, cos, sin):
        v = self.variant
        if v == "reversed":
            return cos * x + sin * rotate_half(x)
        if v == "wrong_half":
            h = x.shape[-1] // 2
            return x * cos + torch.cat((-x[..., :h], x[..., h:]), dim=-1) * sin
        if v == "interleaved":
            return x * cos + rotate_every_two(x) * sin
        if v == "bf16":
            xb = x.to(torch.bfloat16)
            return (xb * cos.to(torch.bfloat16) + rotate_half(xb) * sin.to(torch.bfloat16)).float()
        return x * cos + rotate_half(x) * sin

    def forward(self, x):
        t = x.shape[1]
        rot = 4 if self.variant == "partial" else 8
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        f = self.positions[:t][:, None] * inv[None]
        emb = f.repeat_interleave(2, dim=-1) if self.variant == "interleaved" else torch.cat((f, f), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        q = self.q_proj(x).view(1, t, 4, 8).transpose(1, 2)
        k = self.k_proj(x).view(1, t, 4, 8).transpose(1, 2)
        if self.variant == "partial":
            q = torch.cat((self.rotate(q[..., :rot], cos, sin), q[..., rot:]), dim=-1)
            k = torch.cat((self.rotate(k[..., :rot], cos, sin), k[..., rot:]), dim=-1)
        else:
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        return (q * k).transpose(1, 2).reshape(1, t, H)


@pytest.mark.parametrize("variant,detail", [("half", "pairing=half sites=2 width=8"),
                                            ("reversed", "pairing=half sites=2 width=8"),
                                            ("partial", "pairing=half sites=2 width=4"),
                                            ("interleaved", "pairing=interleaved sites=2 width=8")])
def test_rope_variants_fuse(variant, detail, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(Rope(variant)), tmp_path / variant))
    e = entry(r, "block", "rope")
    assert e and e["status"] == "fused" and e["detail"] == detail, e
    assert r["totals"]["rope"] == {"applied": 1, "candidates": 1}


@pytest.mark.parametrize("variant,reason", [("wrong_half", "is not rotate_half"), ("bf16", "f32 only")])
def test_rope_rejects(variant, reason, fuselm_bin, tmp_path):
    e = entry(inspect(fuselm_bin, capture_toy(Wrap(Rope(variant)), tmp_path / variant)), "block", "rope")
    assert e and e["status"] == "rejected" and reason in e["detail"], e


# ---------------------------------------------------------------- tanh soft-capping

class Softcap(nn.Module):
    """A projection soft-capped as transformers writes it (Gemma 2's final_logit_softcapping):
    `y / c; tanh; y * c`. variant: gemma2 (c = 30), two (a second site, 50.0 · tanh(z / 50.0), the
    factor first), other_factor (÷ 30, × 20: not a soft-cap), tanh_shared (the tanh also read by a
    sum), div_shared (the quotient also read by a sum)."""

    def __init__(self, variant="gemma2"):
        super().__init__()
        self.variant = variant
        self.proj = nn.Linear(H, H, bias=False)

    def forward(self, x):
        y = self.proj(x) * 4.0
        v = self.variant
        if v == "other_factor":
            return torch.tanh(y / 30.0) * 20.0
        if v == "tanh_shared":
            t = torch.tanh(y / 30.0)
            return t * 30.0 + t
        if v == "div_shared":
            d = y / 30.0
            return torch.tanh(d) * 30.0 + d
        out = torch.tanh(y / 30.0) * 30.0
        if v == "two":
            out = 50.0 * torch.tanh(out / 50.0)
        return out


@pytest.mark.parametrize("variant,detail", [("gemma2", "cap=30 sites=1"), ("two", "sites=2")])
def test_softcap_fuses(variant, detail, fuselm_bin, tmp_path):
    d = capture_toy(Wrap(Softcap(variant)), tmp_path / variant)
    r = inspect(fuselm_bin, d)
    e = entry(r, "block", "softcap")
    assert e and e["status"] == "fused" and e["detail"] == detail, e
    assert r["totals"]["softcap"] == {"applied": 1, "candidates": 1}


@pytest.mark.parametrize("variant,reason", [("other_factor", "multiplied by 20, not the cap"),
                                            ("tanh_shared", "read by something else than one product"),
                                            ("div_shared", "read by something else than the tanh")])
def test_softcap_rejects(variant, reason, fuselm_bin, tmp_path):
    e = entry(inspect(fuselm_bin, capture_toy(Wrap(Softcap(variant)), tmp_path / variant)), "block", "softcap")
    assert e and e["status"] == "rejected" and reason in e["detail"], e


# ---------------------------------------------------------------- real families: plan and logits

def expected_plan(family: str) -> tuple[dict, dict]:
    """(fuser -> modules it must fuse, fuser -> reason every candidate must be rejected with), from
    what structurally applies to the family; a fuser in neither has no fusion in the model."""
    n = tiny_models.make_config(family).num_hidden_layers
    separate = {"attention": n, "qkv": n}
    rope = {"rope": n}  # rotate_half on q and k in every attention module
    glu_rms = {"glu": n, "rms_norm": 2 * n + 1}  # a norm before attention and MLP, one final
    plain_mlp = {"glu": "plain MLP"}
    per_head = {"packed_qkv": "viewed per head", "qkv": "a packed projection", **plain_mlp}
    return {
        "llama": ({**separate, **glu_rms, **rope}, {}),
        "qwen2": ({**separate, **glu_rms, **rope}, {}),
        "mistral": ({**separate, **glu_rms, **rope}, {}),
        "gemma": ({**separate, **glu_rms, **rope}, {}),  # (1 + w) norms
        "qwen3": ({**separate, **glu_rms, **rope, "rms_norm": 4 * n + 1}, {}),  # + per-head q/k norms
        # + post-attention/-MLP norms; the final logit soft-capping 30·tanh(logits/30)
        "gemma2": ({**separate, **glu_rms, **rope, "rms_norm": 4 * n + 1, "softcap": 1}, {}),
        "gemma3_text": ({**separate, **glu_rms, **rope, "rms_norm": 6 * n + 1}, {}),  # both, + q/k norms
        "phi3": ({"attention": n, "packed_qkv": n, "packed_glu": n, "rms_norm": 2 * n + 1, **rope}, {}),
        "opt": (separate, plain_mlp),  # LayerNorm, q pre-scaled
        "gpt2": ({"attention": n, "packed_qkv": n}, plain_mlp),  # Conv1D c_attn split in 3
        "gpt_bigcode_mqa": ({"attention": n, "packed_qkv": n}, plain_mlp),
        "gpt_bigcode_mha": ({"attention": n}, per_head),
        "gpt_neox": ({"attention": n, **rope}, per_head),  # partial rotary: the first half of each head
    }[family]


@pytest.fixture(scope="module")
def family_dir(model_cache):
    def get(family):
        d = model_cache / family
        if not (d / "config.json").exists():
            tiny_models.build(family, d)
        return d
    return get


# Families whose plan expected_plan writes out; the others of the parity list are checked against
# transformers by test_parity.py, and their fusions are listed in docs/models.md.
PLANNED = ("llama", "qwen2", "mistral", "gemma", "qwen3", "gemma2", "gemma3_text", "phi3", "opt", "gpt2",
           "gpt_bigcode_mqa", "gpt_bigcode_mha", "gpt_neox")


# The default run takes one family per plan shape (separate q/k/v with GLU, sliding window with q/k
# norms, packed qkv and gate_up, multi-query, parallel residual, ReLU MLP); long mode takes them all.
@pytest.mark.parametrize("family", long_mode.split([f for f in tiny_models.FAMILIES if f in PLANNED],
                                                   default=["llama", "gemma3_text", "phi3", "gpt_bigcode_mqa",
                                                            "gpt_neox", "opt"]))
def test_family_plan_fused_unfused_and_transformers(family, family_dir, fuselm_bin, tmp_path):
    """Every parity family: inspect's plan is the expected one on every layer, and logits with all
    fusers on equal --no-fuse (fp32 rounding) and transformers (test_parity covers longer prompts,
    with fusers on)."""
    from parity import check_against_oracle, hf_model
    d = family_dir(family)
    fused_ok, rejected = expected_plan(family)
    r = inspect(fuselm_bin, d)
    assert r["errors"] == []
    for fuser, t in r["totals"].items():
        if fuser in fused_ok:
            assert t == {"applied": fused_ok[fuser], "candidates": fused_ok[fuser]}, (fuser, t, r["modules"])
        else:
            assert t["applied"] == 0, (fuser, t)
            reason = rejected.get(fuser)
            cands = [e for e in r["modules"] if e["fuser"] == fuser]
            assert len(cands) == t["candidates"] and (t["candidates"] > 0) == (reason is not None), (fuser, cands)
            assert all(e["status"] == "rejected" and reason in e["detail"] for e in cands), cands
    # The softmax scale the model passes at the call: OPT pre-scales q and passes 1.0, Gemma 2/3
    # pass query_pre_attn_scalar**-0.5, the rest head_dim**-0.5 (every tiny family has head size 16).
    cfg = tiny_models.make_config(family)
    want = 1.0 if family == "opt" else (getattr(cfg, "query_pre_attn_scalar", None) or 16) ** -0.5
    for e in (e for e in r["modules"] if e["fuser"] == "attention"):
        got = float(re.search(r"scale=(\S+) \(op argument\)", e["detail"]).group(1))
        assert got == pytest.approx(want, rel=1e-5), (family, e)
    prompt = [int(x) for x in np.random.default_rng(7).integers(0, 500, size=7)]
    fused_res, fused = fuselm_runner.generate(fuselm_bin, d, prompt, 8, tmp_path)
    plain_res, plain = fuselm_runner.generate(fuselm_bin, d, prompt, 8, tmp_path, extra=["--no-fuse"])
    scale = float(np.abs(plain).max())
    diff = float(np.abs(fused - plain).max())
    print(f"\n{family}: fused vs unfused max |logit diff| / max|logit| = {diff / scale:.2e}")
    assert diff <= 1e-5 * scale
    assert fused_res["token_ids"] == plain_res["token_ids"]
    check_against_oracle(f"{family}/fused", hf_model(d), prompt, fused_res["token_ids"], fused)


def test_softcap_logits_bit_identical_on_gemma2(family_dir, fuselm_bin, tmp_path):
    """The fused soft-cap computes what the unfused div, tanh and mul compute, element for element
    (the same kernels): Gemma 2's logits are bit-identical with and without the softcap fuser."""
    d = family_dir("gemma2")
    prompt = [int(x) for x in np.random.default_rng(7).integers(0, 500, size=7)]
    _, fused = fuselm_runner.generate(fuselm_bin, d, prompt, 8, tmp_path)
    _, plain = fuselm_runner.generate(fuselm_bin, d, prompt, 8, tmp_path, extra=["--disable-fuser", "softcap"])
    assert fused.tobytes() == plain.tobytes()


# ---------------------------------------------------------------- name blindness

V, NH, HD, LAYERS = 96, 4, 8, 2
CONVENTIONAL = dict(embed="embed_tokens", layers="layers", norm1="input_layernorm", attn="self_attn",
                    q="q_proj", k="k_proj", v="v_proj", o="o_proj", norm2="post_attention_layernorm", mlp="mlp",
                    gate="gate_proj", up="up_proj", down="down_proj", final="norm", head="lm_head", w="weight")
SCRAMBLED = dict(zip(CONVENTIONAL, ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                                    "kappa", "lam", "mu", "nu", "xi", "omicron", "pi"]))


class NamedRms(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        self.register_parameter(n["w"], nn.Parameter(torch.ones(H) + 0.1 * torch.randn(H)))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return getattr(self, self.n["w"]) * y.to(x.dtype)


class NamedAttn(nn.Module):
    def __init__(self, n, layer_idx):
        super().__init__()
        self.n, self.layer_idx = n, layer_idx
        for role, out in (("q", NH * HD), ("k", NH * HD // 2), ("v", NH * HD // 2)):  # GQA
            setattr(self, n[role], nn.Linear(H, out, bias=False))
        setattr(self, n["o"], nn.Linear(NH * HD, H, bias=False))
        self.extra = nn.Linear(H, 1, bias=False)  # a projection of another width beside q, k, v

    def forward(self, x):
        t = x.shape[1]
        # Computed in v, k, q order: roles come from where the values flow, not from order.
        v, k, q = (getattr(self, self.n[r])(x).view(1, t, -1, HD).transpose(1, 2) for r in ("v", "k", "q"))
        a = torch.ops.fuselm.attention(q, k, v, None, HD ** -0.5, -1, 0.0, self.layer_idx)
        return getattr(self, self.n["o"])(a.reshape(1, t, NH * HD)) * torch.sigmoid(self.extra(x))


class NamedMlp(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        setattr(self, n["gate"], nn.Linear(H, I, bias=False))
        setattr(self, n["up"], nn.Linear(H, I, bias=False))
        setattr(self, n["down"], nn.Linear(I, H, bias=False))

    def forward(self, x):
        g = getattr(self, self.n["gate"])
        u = getattr(self, self.n["up"])
        return getattr(self, self.n["down"])(F.silu(g(x)) * u(x))


class NamedLayer(nn.Module):
    def __init__(self, n, idx):
        super().__init__()
        self.n = n
        setattr(self, n["norm1"], NamedRms(n))
        setattr(self, n["attn"], NamedAttn(n, idx))
        setattr(self, n["norm2"], NamedRms(n))
        setattr(self, n["mlp"], NamedMlp(n))

    def forward(self, x):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        x = x + g("attn")(g("norm1")(x))
        return x + g("mlp")(g("norm2")(x))


class NamedLM(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        setattr(self, n["embed"], nn.Embedding(V, H))
        setattr(self, n["layers"], nn.ModuleList([NamedLayer(n, i) for i in range(LAYERS)]))
        setattr(self, n["final"], NamedRms(n))
        setattr(self, n["head"], nn.Linear(H, V, bias=False))

    def forward(self, input_ids, position_ids):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        x = g("embed")(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        for layer in g("layers"):
            x = layer(x)
        return g("head")(g("final")(x))


def build_named_lm(names: dict, out_dir: Path) -> Path:
    torch.manual_seed(0)
    model = NamedLM(names).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    toy_lm.save_toy_lm(model, out_dir, V)
    return out_dir


def test_name_blindness(fuselm_bin, tmp_path):
    a = build_named_lm(CONVENTIONAL, tmp_path / "conventional")
    b = build_named_lm(SCRAMBLED, tmp_path / "scrambled")
    ra, rb = inspect(fuselm_bin, a), inspect(fuselm_bin, b)
    plan = lambda r: sorted((e["fuser"], e["status"], e["detail"]) for e in r["modules"])  # noqa: E731
    assert plan(ra) == plan(rb)
    assert ra["totals"] == rb["totals"]
    assert ra["totals"]["glu"]["applied"] == LAYERS and ra["totals"]["rms_norm"]["applied"] == 2 * LAYERS + 1
    assert ra["totals"]["attention"]["applied"] == LAYERS
    assert ra["totals"]["qkv"]["applied"] == LAYERS
    qkv = entry(rb, "beta.0.delta", "qkv")["detail"]
    assert f"rows={NH * HD}+{NH * HD // 2}+{NH * HD // 2}" in qkv
    # TP sections from the op's operands: 4 q heads, 2 KV heads of 8; the output projection found
    # although its result is gated by another projection of x.
    assert f"per-rank=[{NH}/tp*{HD},max(1,{NH // 2}/tp)*{HD},max(1,{NH // 2}/tp)*{HD}] out=row" in qkv, qkv
    prompt = [3, 14, 15, 92, 65, 35]
    res_a, la = fuselm_runner.generate(fuselm_bin, a, prompt, 6, tmp_path)
    res_b, lb = fuselm_runner.generate(fuselm_bin, b, prompt, 6, tmp_path)
    assert res_a["token_ids"] == res_b["token_ids"]
    np.testing.assert_array_equal(la, lb)
    _, lu = fuselm_runner.generate(fuselm_bin, a, prompt, 6, tmp_path, extra=["--no-fuse"])
    assert float(np.abs(la - lu).max()) <= 1e-5 * float(np.abs(lu).max())


# ---------------------------------------------------------------- attention sites

class ToyAttn(nn.Module):
    def __init__(self, layer_idx, scale=None):
        super().__init__()
        self.layer_idx, self.scale = layer_idx, scale
        self.qkv = nn.ModuleList([nn.Linear(H, NH * HD, bias=False) for _ in range(3)])

    def forward(self, x):
        from fuselm_capture import ops  # noqa: F401
        t = x.shape[1]
        q, k, v = (p(x).view(1, t, NH, HD).transpose(1, 2) for p in self.qkv)
        scale = self.scale if self.scale is not None else HD ** -0.5
        return torch.ops.fuselm.attention(q, k, v, None, scale, -1, 0.0, self.layer_idx).reshape(1, t, NH * HD)


class AttnStack(nn.Module):
    """Layers of `per_layer` attention modules each; indices as given."""

    def __init__(self, indices, scale=None):
        super().__init__()
        self.attns = nn.ModuleList([ToyAttn(i, scale) for i in indices])

    def forward(self, x):
        for a in self.attns:
            x = x + a(x)
        return x


def test_attention_layer_indices_longcat_style(fuselm_bin, tmp_path):
    # Two layers with two attention modules each: indices 0..3 are the calls' order in the graph.
    r = inspect(fuselm_bin, capture_toy(AttnStack([0, 1, 2, 3]), tmp_path / "lc"))
    assert r["totals"]["attention"] == {"applied": 4, "candidates": 4}
    for i in range(4):
        assert f"layer={i} (call order)" in entry(r, f"attns.{i}", "attention")["detail"]


def test_attention_scale_is_the_op_argument(fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(AttnStack([0], scale=1.0), tmp_path / "opt"))
    assert "scale=1 (op argument)" in entry(r, "attns.0", "attention")["detail"]


def yarn_mscale(factor: float, mscale_all_dim: float) -> float:
    """DeepSeek-V3's yarn_get_mscale (transformers.models.deepseek_v3), written out here."""
    return 0.1 * mscale_all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0


class ScaledAttn(nn.Module):
    """Attention through transformers' AttentionInterface entry, as models call it. `scaling` is
    the module attribute a model keeps (head_dim**-0.5, a decoy); the call passes `kind`'s scale:
      opt:      q pre-scaled by head_dim**-0.5, the call passes 1.0
      gemma2:   query_pre_attn_scalar**-0.5 (here 24, head size 8)
      yarn:     DeepSeek-V3 with yarn rope: head_dim**-0.5 · mscale² (factor 40, mscale_all_dim 1)
    """

    def __init__(self, kind):
        super().__init__()
        self.kind, self.layer_idx, self.scaling = kind, 0, HD ** -0.5
        self.q, self.k, self.v = (nn.Linear(H, NH * HD, bias=False) for _ in range(3))
        self.o = nn.Linear(NH * HD, H, bias=False)

    def call_scale(self):
        return {"opt": 1.0, "gemma2": 24 ** -0.5, "yarn": HD ** -0.5 * yarn_mscale(40, 1.0) ** 2}[self.kind]

    def forward(self, x):
        from fuselm_capture.ops import attention_forward
        t = x.shape[1]
        q = self.q(x)
        if self.kind == "opt":
            q = q * self.scaling
        q, k, v = (z.view(1, t, NH, HD).transpose(1, 2) for z in (q, self.k(x), self.v(x)))
        a, _ = attention_forward(self, q, k, v, None, scaling=self.call_scale())
        return self.o(a.reshape(1, t, NH * HD))


@pytest.mark.parametrize("kind", ["opt", "gemma2", "yarn"])
def test_attention_scale_cases(kind, fuselm_bin, tmp_path):
    block = ScaledAttn(kind)
    r = inspect(fuselm_bin, capture_toy(Wrap(block), tmp_path / kind))
    detail = entry(r, "block", "attention")["detail"]
    scale = float(re.search(r"scale=(\S+) \(op argument\)", detail).group(1))
    assert scale == pytest.approx(block.call_scale(), rel=1e-5), detail
    assert scale != pytest.approx(block.scaling, rel=1e-3)  # the attribute is not what was read
    # q's pre-scaling (OPT) lies on the way back from the op's q operand: still three projections.
    assert entry(r, "block", "qkv")["status"] == "fused"


def test_attention_layers_are_the_calls_order_not_the_module_attribute(fuselm_bin, tmp_path):
    # Two modules that both say layer_idx 2: capture numbers the calls, so they hold KV layers 0, 1.
    r = inspect(fuselm_bin, capture_toy(AttnStack([2, 2]), tmp_path / "same"))
    assert r["totals"]["attention"] == {"applied": 2, "candidates": 2}
    for i in range(2):
        assert f"layer={i} (call order)" in entry(r, f"attns.{i}", "attention")["detail"]


@pytest.mark.parametrize("indices,message", [
    ([0, 0], "layer index 0 is claimed by two attention modules: attns.0 and attns.1"),
    ([0, 2], "no attention module serves layer index 1"),
])
def test_attention_index_errors(indices, message, fuselm_bin, tmp_path):
    # An IR whose ops carry other indices than capture's numbering (written by hand or by another tool).
    d = capture_toy(AttnStack(indices), tmp_path / "bad")
    path = d / "fuselm-ir" / "ir.json"
    ir = json.loads(path.read_text())
    ops = [n for n in ir["nodes"] if n["op"] == "fuselm.attention.default"]
    for n, i in zip(ops, indices):
        n["args"][7] = i
    path.write_text(json.dumps(ir))
    r = inspect(fuselm_bin, d, ok=False)
    assert r["returncode"] != 0 and any(message in e for e in r["errors"]), r["errors"]


def test_attention_unresolvable_scale_is_an_error(fuselm_bin, tmp_path):
    # torch.export specializes Python-float scales, so write the IR a capture could not resolve.
    d = capture_toy(AttnStack([0]), tmp_path / "noscale")
    path = d / "fuselm-ir" / "ir.json"
    ir = json.loads(path.read_text())
    for n in ir["nodes"]:
        if n["op"] == "fuselm.attention.default":
            n["args"][4] = None
    path.write_text(json.dumps(ir))
    r = inspect(fuselm_bin, d, ok=False)
    assert r["returncode"] != 0 and any("softmax scale is not a number" in e for e in r["errors"]), r


class PackedAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_idx = 0
        self.qkv = nn.Linear(H, 3 * NH * HD, bias=False)

    def forward(self, x):
        from fuselm_capture import ops  # noqa: F401
        t = x.shape[1]
        q, k, v = (p.view(1, t, NH, HD).transpose(1, 2) for p in self.qkv(x).split(NH * HD, dim=-1))
        return torch.ops.fuselm.attention(q, k, v, None, HD ** -0.5, -1, 0.0, 0).reshape(1, t, NH * HD)


class NormedAttn(ToyAttn):
    """q/k norms between the projections and the op: per head (Qwen3, Gemma 3: over the head size
    after the view) or over the whole projection width before the view (OLMo 2)."""

    def __init__(self, per_head=True):
        super().__init__(0)
        self.per_head = per_head
        width = HD if per_head else NH * HD
        self.q_norm, self.k_norm = RmsLlama(), RmsLlama()
        self.q_norm.weight = nn.Parameter(torch.ones(width))
        self.k_norm.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        from fuselm_capture import ops  # noqa: F401
        t = x.shape[1]
        if self.per_head:
            q = self.q_norm(self.qkv[0](x).view(1, t, NH, HD)).transpose(1, 2)
            k = self.k_norm(self.qkv[1](x).view(1, t, NH, HD)).transpose(1, 2)
        else:
            q = self.q_norm(self.qkv[0](x)).view(1, t, NH, HD).transpose(1, 2)
            k = self.k_norm(self.qkv[1](x)).view(1, t, NH, HD).transpose(1, 2)
        v = self.qkv[2](x).view(1, t, NH, HD).transpose(1, 2)
        return torch.ops.fuselm.attention(q, k, v, None, 0.3, -1, 0.0, 0).reshape(1, t, NH * HD)


@pytest.mark.parametrize("per_head,width", [(True, HD), (False, NH * HD)])
def test_qkv_with_qk_norms_fuses(per_head, width, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(NormedAttn(per_head)), tmp_path / "normed"))
    assert entry(r, "block", "qkv")["status"] == "fused"
    for m in ("block.q_norm", "block.k_norm"):
        e = entry(r, m, "rms_norm")
        assert e["status"] == "fused" and f"width={width}" in e["detail"], e


class GqaNormedAttn(ToyAttn):
    """q/k norms of one class after the head transpose with fewer KV heads than query heads
    (issue 15: the match cache, keyed without shapes, gave k_norm q_norm's output shape)."""

    KV = 2

    def __init__(self):
        super().__init__(0)
        self.qkv = nn.ModuleList([nn.Linear(H, NH * HD, bias=False), nn.Linear(H, self.KV * HD, bias=False),
                                  nn.Linear(H, self.KV * HD, bias=False)])
        self.q_norm, self.k_norm = RmsLlama(), RmsLlama()
        self.q_norm.weight = nn.Parameter(torch.ones(HD))
        self.k_norm.weight = nn.Parameter(torch.ones(HD))

    def forward(self, x):
        from fuselm_capture import ops  # noqa: F401
        t = x.shape[1]
        q = self.q_norm(self.qkv[0](x).view(1, t, NH, HD).transpose(1, 2))
        k = self.k_norm(self.qkv[1](x).view(1, t, self.KV, HD).transpose(1, 2))
        v = self.qkv[2](x).view(1, t, self.KV, HD).transpose(1, 2)
        return torch.ops.fuselm.attention(q, k, v, None, 0.3, -1, 0.0, 0).reshape(1, t, NH * HD)


def test_match_cache_key_holds_shapes(fuselm_bin, tmp_path):
    d = capture_toy(Wrap(GqaNormedAttn()), tmp_path / "gqa_normed")
    r = inspect(fuselm_bin, d)
    for m in ("block.q_norm", "block.k_norm"):
        assert entry(r, m, "rms_norm")["status"] == "fused", entry(r, m, "rms_norm")
    assert not entry(r, "block.k_norm", "rms_norm")["cached"]  # another shape: its own match
    layer = r["kv_cache"]["layers"][0]
    assert (layer["k_width"], layer["v_width"]) == (GqaNormedAttn.KV * HD, GqaNormedAttn.KV * HD), layer
    assert r["kv_cache"] == inspect(fuselm_bin, d, "--disable-fuser", "rms_norm")["kv_cache"]


def test_packed_qkv_is_not_qkv(fuselm_bin, tmp_path):
    d = capture_toy(Wrap(PackedAttn()), tmp_path / "packed")
    e = entry(inspect(fuselm_bin, d, "--disable-fuser", "packed_qkv"), "block", "qkv")
    assert e["status"] == "rejected" and "a packed projection" in e["detail"], e
    e = entry(inspect(fuselm_bin, d), "block", "packed_qkv")
    assert e["status"] == "fused" and f"sections=q:{NH}x{HD}+k:{NH}x{HD}+v:{NH}x{HD}" in e["detail"], e


# ---------------------------------------------------------------- packed QKV

EAGER = {"on": False}  # True: attend with torch (the oracle) instead of capturing fuselm's op


def attend(q, k, v, scale):
    """fuselm's attention op at capture; causal SDPA with K/V repeated per group as the oracle."""
    if not EAGER["on"]:
        from fuselm_capture import ops  # noqa: F401
        return torch.ops.fuselm.attention(q, k, v, None, scale, -1, 0.0, 0)
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2)

class MqaPacked(nn.Module):
    """GPTBigCode multi_query: one projection cut (q, kv, kv) after an unsqueeze, k and v one head;
    the output projection comes after the attention output went through dropout and a gate."""

    def __init__(self, kv_heads=1, bias=True):
        super().__init__()
        self.layer_idx = 0
        self.kv = kv_heads * HD
        self.c_attn = nn.Linear(H, NH * HD + 2 * self.kv, bias=bias)
        self.c_proj = nn.Linear(NH * HD, H)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        t = x.shape[1]
        q, k, v = self.c_attn(x).unsqueeze(1).split((NH * HD, self.kv, self.kv), dim=3)
        q = q.view(1, t, NH, HD).transpose(1, 2)
        if self.kv > HD:  # more than one KV head: per-head layout for the op
            k, v = (z.view(1, t, -1, HD).transpose(1, 2) for z in (k, v))
        a = attend(q, k, v, HD ** -0.5).reshape(1, t, NH * HD)
        return self.c_proj(F.gelu(self.drop(a)))


class Phi3Packed(nn.Module):
    """Phi-3: qkv_proj sliced three ways (GQA widths), the slices taken in v, k, q order, rope-like
    rotation on q and k; the output projection after dropout."""

    def __init__(self, gap=0):
        super().__init__()
        self.layer_idx = 0
        self.qkv_proj = nn.Linear(H, (NH + 2 * (NH // 2)) * HD + gap, bias=False)
        self.o_proj = nn.Linear(NH * HD, H, bias=False)

    def forward(self, x):
        t = x.shape[1]
        qkv = self.qkv_proj(x)
        nq, nk = NH * HD, NH // 2 * HD
        v = qkv[..., nq + nk:nq + 2 * nk].view(1, t, -1, HD).transpose(1, 2)
        k = qkv[..., nq:nq + nk].view(1, t, -1, HD).transpose(1, 2)
        q = qkv[..., :nq].view(1, t, -1, HD).transpose(1, 2)
        rot = lambda z: torch.cat([-z[..., HD // 2:], z[..., :HD // 2]], dim=-1)  # noqa: E731
        q, k = q * 0.8 + rot(q) * 0.6, k * 0.8 + rot(k) * 0.6
        a = attend(q, k, v, HD ** -0.5).reshape(1, t, NH * HD)
        return self.o_proj(F.dropout(a, 0.1, training=False))


class PerHeadPacked(nn.Module):
    """GPT-NeoX / GPTBigCode multi-head: the projection viewed [.., heads, 3·d], then split per head."""

    def __init__(self):
        super().__init__()
        self.layer_idx = 0
        self.qkv = nn.Linear(H, 3 * NH * HD)
        self.out = nn.Linear(NH * HD, H)

    def forward(self, x):
        from fuselm_capture import ops  # noqa: F401
        t = x.shape[1]
        q, k, v = self.qkv(x).view(1, t, NH, 3 * HD).transpose(1, 2).split(HD, dim=3)
        a = torch.ops.fuselm.attention(q, k, v, None, HD ** -0.5, -1, 0.0, 0).reshape(1, t, NH * HD)
        return self.out(a)


class PackedGlu(nn.Module):
    """Phi-3's MLP: gate_up_proj cut in two halves (chunk or slices), act(gate) · up, down_proj."""

    def __init__(self, cut="chunk", act="silu", gate_second=False, reverse=False):
        super().__init__()
        self.gate_up_proj = nn.Linear(H, 2 * I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.cut, self.act, self.gate_second, self.reverse = cut, act, gate_second, reverse

    def forward(self, x):
        y = self.gate_up_proj(x)
        if self.cut == "chunk":
            a, b = y.chunk(2, dim=-1)
        else:
            a, b = y[..., :I], y[..., I:]
        gate, up = (b, a) if self.gate_second else (a, b)
        g = F.silu(gate) if self.act == "silu" else (F.gelu(gate, approximate="tanh") if self.act == "gelu_tanh"
                                                     else F.dropout(gate, 0.1, training=False))
        return self.down_proj(g * up if self.reverse else up * g)


class Phi3Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.mlp = Phi3Packed(), PackedGlu(cut="slices", act="gelu_tanh")

    def forward(self, x):
        x = x + self.attn(x)
        return self.mlp(x)


@pytest.mark.parametrize("name,module,detail", [
    ("chunk", lambda: PackedGlu(), f"act=silu down=yes rows=2x{I}"),
    ("slices_reversed", lambda: PackedGlu(cut="slices", reverse=True), f"act=silu down=yes rows=2x{I}"),
    ("gelu_tanh", lambda: PackedGlu(act="gelu_tanh"), f"act=gelu_tanh down=yes rows=2x{I}"),
])
def test_packed_glu_fuses(name, module, detail, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(module()), tmp_path / name))
    e = entry(r, "block", "packed_glu")
    assert e and e["status"] == "fused" and e["detail"] == detail, e
    assert r["totals"]["glu"]["candidates"] == 0


@pytest.mark.parametrize("name,module,reason", [
    ("gate_second", lambda: PackedGlu(gate_second=True), "gate in the second half"),
    ("dropout", lambda: PackedGlu(act="dropout"), "not an activation"),
])
def test_packed_glu_rejects(name, module, reason, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(module()), tmp_path / name))
    e = entry(r, "block", "packed_glu")
    assert e and e["status"] == "rejected" and reason in e["detail"], r["modules"]


class PackedLM(nn.Module):
    """A tiny LM around one packed attention block, so the engine can run it (logits fused vs not)."""

    def __init__(self, block):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.block = block
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        return self.head(x + self.block(x))


@pytest.mark.parametrize("name,module,detail", [
    ("mqa", lambda: MqaPacked(), f"bias sections=q:{NH}x{HD}+k:1x{HD}+v:1x{HD} per-rank=[{NH}/tp*{HD},{HD},{HD}] out=row"),
    ("mqa_gqa_no_bias", lambda: MqaPacked(kv_heads=2, bias=False),
     f"sections=q:{NH}x{HD}+k:2x{HD}+v:2x{HD} per-rank=[{NH}/tp*{HD},max(1,2/tp)*{HD},max(1,2/tp)*{HD}] out=row"),
    ("phi3", lambda: Phi3Packed(), f"sections=q:{NH}x{HD}+k:{NH // 2}x{HD}+v:{NH // 2}x{HD}"),
])
def test_packed_qkv_fuses(name, module, detail, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(module()), tmp_path / name))
    e = entry(r, "block", "packed_qkv")
    assert e and e["status"] == "fused" and detail in e["detail"], e
    assert e["detail"].endswith("out=row")
    assert entry(r, "block", "qkv") is None  # the module is rewritten once: qkv is not tried after
    assert r["totals"]["packed_qkv"] == {"applied": 1, "candidates": 1}


@pytest.mark.parametrize("name,module,reason", [
    ("per_head", lambda: PerHeadPacked(), f"viewed per head ([..., {NH}, {3 * HD}]) before it is split"),
    ("gap", lambda: Phi3Packed(gap=4), f"the pieces cover {2 * NH * HD} of the projection's {2 * NH * HD + 4} columns"),
])
def test_packed_qkv_rejects(name, module, reason, fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(Wrap(module()), tmp_path / name))
    e = entry(r, "block", "packed_qkv")
    assert e and e["status"] == "rejected" and reason in e["detail"], e
    assert r["totals"]["packed_qkv"]["applied"] == 0
    assert entry(r, "block", "attention")["status"] == "fused"


def test_packed_qkv_checks_each_instance(fuselm_bin, tmp_path):
    # Two modules of one class and one structure (the same slice bounds), the second projection 4
    # columns wider: the cached plan of the first must not be taken for the second. The cache key
    # holds shapes (issue 15), so the second is matched on its own widths.
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Phi3Packed(), Phi3Packed(gap=4)

        def forward(self, x):
            return self.a(x) + self.b(x)

    r = inspect(fuselm_bin, capture_toy(Two(), tmp_path / "two"), ok=False)  # both claim layer 0
    assert entry(r, "a", "packed_qkv")["status"] == "fused"
    e = entry(r, "b", "packed_qkv")
    assert not e["cached"] and e["status"] == "rejected", e
    assert f"the pieces cover {2 * NH * HD} of the projection's {2 * NH * HD + 4} columns" in e["detail"], e


def test_packed_qkv_not_a_candidate_for_three_projections(fuselm_bin, tmp_path):
    r = inspect(fuselm_bin, capture_toy(AttnStack([0]), tmp_path / "three"))
    assert r["totals"]["packed_qkv"] == {"applied": 0, "candidates": 0}
    assert r["totals"]["qkv"] == {"applied": 1, "candidates": 1}


@pytest.mark.parametrize("block", [MqaPacked, Phi3Block])
def test_packed_logits_equal_unfused(block, fuselm_bin, tmp_path):
    from safetensors.torch import save_file
    from fuselm_capture.capture import capture_module
    torch.manual_seed(0)
    model = PackedLM(block()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    d = tmp_path / block.__name__
    t = torch.export.Dim("num_tokens", min=2, max=2048)
    capture_module(model, {"input_ids": torch.zeros(1, 8, dtype=torch.long), "position_ids": torch.arange(8)[None]},
                   {"input_ids": {1: t}, "position_ids": {1: t}}, d / "fuselm-ir")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(d / "model.safetensors"))
    config = json.dumps({"vocab_size": V, "max_position_embeddings": 2048})
    (d / "config.json").write_text(config)
    ir = json.loads((d / "fuselm-ir" / "ir.json").read_text())
    ir["model"].update(config_json=config, vocab_size=V, max_position_embeddings=2048)
    (d / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    r = inspect(fuselm_bin, d)
    assert r["totals"]["packed_qkv"]["applied"] == 1
    assert r["totals"]["packed_glu"]["applied"] == (block is Phi3Block)
    prompt = [5, 17, 33, 2, 90, 41, 8]
    res, fused = fuselm_runner.generate(fuselm_bin, d, prompt, 6, tmp_path)
    _, plain = fuselm_runner.generate(fuselm_bin, d, prompt, 6, tmp_path, extra=["--no-fuse"])
    # The oracle: the module itself on the whole sequence (causal attention in fuselm's op).
    ids = torch.tensor([prompt + res["token_ids"][:-1]])
    EAGER["on"] = True
    try:
        with torch.no_grad():
            ref = model(ids, torch.arange(ids.shape[1])[None])[0].numpy()
    finally:
        EAGER["on"] = False
    scale = float(np.abs(ref).max())
    assert float(np.abs(fused - plain).max()) <= 1e-5 * scale
    assert float(np.abs(fused - ref).max()) <= 1e-4 * scale
