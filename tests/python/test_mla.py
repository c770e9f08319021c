"""Multi-head latent attention (docs/mla.md): parity with transformers on tiny DeepSeek-V2/V3-style
models on the latent path and on the full-attention fallback, what `inspect --json` reports
(MLA per layer, KV-cache bytes per token), and the mla fuser on toy LMs whose modules carry
conventional or arbitrary names, next to a GLU MLP and a plain attention module it must not match.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import fuselm_runner
import long_mode
import toy_lm
import mla_models
from parity import TIES, check_parity, hf_model
from test_fusers import entry, inspect

# Prompt lengths per case: the 7-token prompt; 1 and 300 tokens in long mode. The fallback path
# (MLA unfused) runs in long mode.
LENGTHS = {"7": [7], "1_300": [1, 300]}
PATHS = {"latent": [], "fallback": ["--disable-fuser", "mla"]}


def prompt_of(length: int, vocab: int, seed: int) -> list[int]:
    g = np.random.default_rng(seed)
    return [int(x) for x in g.integers(0, vocab, size=length)]


def family_dir(model_cache: Path, family: str) -> Path:
    d = model_cache / f"mla_{family}"
    if not (d / "config.json").exists():
        mla_models.build(family, d)
    return d


def attention_modules(report: dict) -> set[str]:
    return {e["module"] for e in report["modules"] if e["fuser"] == "attention"}


# ---------------------------------------------------------------- parity with transformers

@pytest.mark.parametrize("lengths", long_mode.split(LENGTHS, default=["7"]))
@pytest.mark.parametrize("path", long_mode.split(PATHS, default=["latent"]))
@pytest.mark.parametrize("family", list(mla_models.MLA_FAMILIES))
def test_mla_parity(family, path, lengths, fuselm_bin, model_cache, tmp_path):
    model_dir = family_dir(model_cache, family)
    cfg = mla_models.make_config(family)
    # The path under test is the one that ran: every attention layer latent, or none.
    r = inspect(fuselm_bin, model_dir, *PATHS[path])
    mla = {e["module"] for e in r["modules"] if e["fuser"] == "mla" and e["status"] == "fused"}
    assert mla == (attention_modules(r) if path == "latent" else set())
    assert len(attention_modules(r)) == cfg.num_hidden_layers
    model = hf_model(model_dir)
    worst = 0.0
    for length in LENGTHS[lengths]:
        worst = max(worst, check_parity(f"mla/{family}/{path}/{length}", fuselm_bin, model_dir,
                                        prompt_of(length, cfg.vocab_size, seed=length), tmp_path, model=model,
                                        extra=PATHS[path]))
    print(f"\n{family} ({path}): max relative logit difference {worst:.2e}; ties accepted: "
          f"{sum(v for k, v in TIES.items() if k.startswith(f'mla/{family}/{path}/'))}")


def test_v3_style_scale_is_yarn_mscale(fuselm_bin, model_cache):
    """The latent op takes the softmax scale transformers passes (yarn mscale²), not head_dim**-0.5."""
    model_dir = family_dir(model_cache, "v3_style")
    want = hf_model(model_dir).model.layers[0].self_attn.scaling
    cfg = mla_models.make_config("v3_style")
    assert abs(want - (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5) > 1e-3
    r = inspect(fuselm_bin, model_dir)  # captures the model when needed
    ir = json.loads((model_dir / "fuselm-ir" / "ir.json").read_text())
    for e in r["modules"]:
        if e["fuser"] == "mla":
            assert f"scale={want:g}" in e["detail"], e["detail"]
    assert ir["model"]["class"] == "DeepseekV3ForCausalLM"


# ---------------------------------------------------------------- inspect: KV bytes per token

@pytest.mark.parametrize("family", list(mla_models.MLA_FAMILIES))
def test_inspect_kv_bytes_per_token(family, fuselm_bin, model_cache):
    model_dir = family_dir(model_cache, family)
    cfg = mla_models.make_config(family)
    L, H = cfg.num_hidden_layers, cfg.num_attention_heads
    latent = L * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 4
    expanded = L * H * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim) * 4
    r = inspect(fuselm_bin, model_dir)
    assert r["totals"]["mla"] == {"applied": L, "candidates": L}
    assert r["kv_cache"]["bytes_per_token"] == latent
    assert [x["kind"] for x in r["kv_cache"]["layers"]] == ["latent"] * L
    q_lora = cfg.q_lora_rank is not None
    for e in r["modules"]:
        if e["fuser"] == "mla":
            assert ("stacked q_down|kv_down" in e["detail"]) == q_lora, e["detail"]
            assert f"latent={cfg.kv_lora_rank} rope={cfg.qk_rope_head_dim}" in e["detail"]
    padded = L * H * 2 * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) * 4
    assert r["kv_cache"]["fallback_bytes_per_token"] == expanded
    assert r["kv_cache"]["padded_fallback_bytes_per_token"] == padded
    off = inspect(fuselm_bin, model_dir, "--disable-fuser", "mla")
    assert off["kv_cache"]["bytes_per_token"] == expanded
    assert "mla" in off["disabled"]
    assert "fallback_bytes_per_token" not in off["kv_cache"]
    print(f"\n{family}: KV cache {latent} bytes/token latent vs {expanded} full-attention fallback "
          f"({expanded / latent:.1f}x), {padded} with V padded ({padded / latent:.1f}x)")


def test_fallback_warns_naming_the_module(fuselm_bin, model_cache, tmp_path):
    model_dir = family_dir(model_cache, "v3_style")
    import subprocess
    proc = subprocess.run([str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--disable-fuser", "mla"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for i in range(3):
        assert (f"warning: model.layers.{i}.self_attn: latent attention turned off (--disable-fuser mla); "
                "running full attention") in proc.stderr


# ---------------------------------------------------------------- toy LMs: names, rejections

V, HID, NH, R, DR, DN, DV, QR = 96, 32, 4, 12, 4, 6, 5, 10
CONVENTIONAL = dict(embed="embed_tokens", layers="layers", norm1="input_layernorm", attn="self_attn",
                    q="q_proj", q_a="q_a_proj", q_norm="q_a_layernorm", q_b="q_b_proj", kv_a="kv_a_proj_with_mqa",
                    kv_norm="kv_a_layernorm", kv_b="kv_b_proj", k="k_proj", v="v_proj", o="o_proj",
                    norm2="post_attention_layernorm", mlp="mlp", gate="gate_proj", up="up_proj",
                    down="down_proj", final="norm", head="lm_head", w="weight")
SCRAMBLED = dict(zip(CONVENTIONAL, ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                                    "kappa", "lam", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau",
                                    "upsilon", "phi", "chi"]))


class Rms(nn.Module):
    def __init__(self, n, width):
        super().__init__()
        self.n = n
        self.register_parameter(n["w"], nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width)))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return getattr(self, self.n["w"]) * y.to(x.dtype)


def rope(x, pos):
    """Half-split rotary embedding of x [1, h, T, DR] at positions pos [T]."""
    inv = torch.exp(torch.arange(0, DR, 2, dtype=torch.float32) * (-math.log(10000.0) / DR))
    f = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
    x1, x2 = x[..., : DR // 2], x[..., DR // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class ToyMla(nn.Module):
    """MLA with or without q-LoRA; the key assembled by cat (transformers uses new_empty + copy_)."""

    def __init__(self, n, layer_idx, q_lora):
        super().__init__()
        self.n, self.layer_idx, self.q_lora = n, layer_idx, q_lora
        if q_lora:
            setattr(self, n["q_a"], nn.Linear(HID, QR, bias=False))
            setattr(self, n["q_norm"], Rms(n, QR))
            setattr(self, n["q_b"], nn.Linear(QR, NH * (DN + DR), bias=False))
        else:
            setattr(self, n["q"], nn.Linear(HID, NH * (DN + DR), bias=False))
        setattr(self, n["kv_a"], nn.Linear(HID, R + DR, bias=False))
        setattr(self, n["kv_norm"], Rms(n, R))
        setattr(self, n["kv_b"], nn.Linear(R, NH * (DN + DV), bias=False))
        setattr(self, n["o"], nn.Linear(NH * DV, HID, bias=False))

    def forward(self, x, pos):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        t = x.shape[1]
        q = g("q_b")(g("q_norm")(g("q_a")(x))) if self.q_lora else g("q")(x)
        q_nope, q_rot = torch.split(q.view(1, t, NH, DN + DR).transpose(1, 2), [DN, DR], -1)
        lat, k_rot = torch.split(g("kv_a")(x), [R, DR], -1)
        lat = g("kv_norm")(lat).view(1, 1, t, R)
        k_rot = rope(k_rot.view(1, 1, t, DR), pos)
        q = torch.cat([q_nope, rope(q_rot, pos)], -1)
        k_nope, v = torch.split(g("kv_b")(lat).view(1, t, NH, DN + DV).transpose(1, 2), [DN, DV], -1)
        k = torch.cat([k_nope, k_rot.expand(-1, NH, -1, -1)], -1)
        a = torch.ops.fuselm.attention(q, k, v, None, 0.3, -1, 0.0, self.layer_idx)
        return g("o")(a.reshape(1, t, NH * DV))


class ToyAttn(nn.Module):
    """Ordinary attention: k and v from two projections (the mla fuser must not list it)."""

    def __init__(self, n, layer_idx):
        super().__init__()
        self.n, self.layer_idx = n, layer_idx
        for role in ("q", "k", "v"):
            setattr(self, n[role], nn.Linear(HID, NH * 8, bias=False))
        setattr(self, n["o"], nn.Linear(NH * 8, HID, bias=False))

    def forward(self, x, pos):
        t = x.shape[1]
        q, k, v = (getattr(self, self.n[r])(x).view(1, t, NH, 8).transpose(1, 2) for r in ("q", "k", "v"))
        a = torch.ops.fuselm.attention(q, k, v, None, 8 ** -0.5, -1, 0.0, self.layer_idx)
        return getattr(self, self.n["o"])(a.reshape(1, t, NH * 8))


class ToyMlp(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        setattr(self, n["gate"], nn.Linear(HID, 48, bias=False))
        setattr(self, n["up"], nn.Linear(HID, 48, bias=False))
        setattr(self, n["down"], nn.Linear(48, HID, bias=False))

    def forward(self, x):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        return g("down")(F.silu(g("gate")(x)) * g("up")(x))


class ToyLayer(nn.Module):
    def __init__(self, n, idx, kind):
        super().__init__()
        self.n = n
        setattr(self, n["norm1"], Rms(n, HID))
        attn = ToyAttn(n, idx) if kind == "plain" else ToyMla(n, idx, q_lora=kind == "mla_lora")
        setattr(self, n["attn"], attn)
        setattr(self, n["norm2"], Rms(n, HID))
        setattr(self, n["mlp"], ToyMlp(n))

    def forward(self, x, pos):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        x = x + g("attn")(g("norm1")(x), pos)
        return x + g("mlp")(g("norm2")(x))


KINDS = ["mla_lora", "mla", "plain"]  # layer 0: q-LoRA MLA, 1: MLA without, 2: ordinary attention


class ToyLM(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        setattr(self, n["embed"], nn.Embedding(V, HID))
        setattr(self, n["layers"], nn.ModuleList([ToyLayer(n, i, k) for i, k in enumerate(KINDS)]))
        setattr(self, n["final"], Rms(n, HID))
        setattr(self, n["head"], nn.Linear(HID, V, bias=False))

    def forward(self, input_ids, position_ids):
        g = lambda r: getattr(self, self.n[r])  # noqa: E731
        x = g("embed")(input_ids)
        for layer in g("layers"):
            x = layer(x, position_ids[0])
        return g("head")(g("final")(x))


def build_toy(names: dict, out_dir: Path, cls=None) -> Path:
    torch.manual_seed(0)
    model = (cls or ToyLM)(names).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    toy_lm.save_toy_lm(model, out_dir, V)
    return out_dir


def test_toy_mla_names_and_rejections(fuselm_bin, tmp_path):
    a = build_toy(CONVENTIONAL, tmp_path / "conventional")
    b = build_toy(SCRAMBLED, tmp_path / "scrambled")
    ra, rb = inspect(fuselm_bin, a), inspect(fuselm_bin, b)
    plan = lambda r: sorted((e["fuser"], e["status"], e["detail"]) for e in r["modules"])  # noqa: E731
    assert plan(ra) == plan(rb)
    assert ra["kv_cache"] == rb["kv_cache"]
    for r, n in ((ra, CONVENTIONAL), (rb, SCRAMBLED)):
        attn = [f"{n['layers']}.{i}.{n['attn']}" for i in range(3)]
        mlp = [f"{n['layers']}.{i}.{n['mlp']}" for i in range(3)]
        assert r["totals"]["mla"] == {"applied": 2, "candidates": 2}
        lora, direct = entry(r, attn[0], "mla"), entry(r, attn[1], "mla")
        assert lora["status"] == "fused" and f"q_lora={QR} stacked q_down|kv_down" in lora["detail"]
        assert direct["status"] == "fused" and "q=direct" in direct["detail"]
        for d in (lora["detail"], direct["detail"]):
            assert f"heads={NH} latent={R} rope={DR} nope={DN} v={DV} scale=0.3" in d
        assert entry(r, attn[2], "mla") is None  # plain attention: not a candidate
        assert entry(r, attn[2], "qkv")["status"] == "fused"
        for m in mlp:  # GLU MLPs: not candidates, fused by glu
            assert entry(r, m, "mla") is None and entry(r, m, "glu")["status"] == "fused"
        assert [x["kind"] for x in r["kv_cache"]["layers"]] == ["latent", "latent", "kv"]
        assert r["kv_cache"]["bytes_per_token"] == (2 * (R + DR) + 2 * NH * 8) * 4
    # Same logits under either naming; the latent path (with the stacked [q_down; kv_down] GEMM)
    # equals the unfused graph and the full-attention fallback.
    prompt = [3, 14, 15, 92, 65, 35, 89, 79, 32]
    res_a, la = fuselm_runner.generate(fuselm_bin, a, prompt, 8, tmp_path)
    res_b, lb = fuselm_runner.generate(fuselm_bin, b, prompt, 8, tmp_path)
    assert res_a["token_ids"] == res_b["token_ids"]
    np.testing.assert_array_equal(la, lb)
    for extra in (["--no-fuse"], ["--disable-fuser", "mla"]):
        res_u, lu = fuselm_runner.generate(fuselm_bin, a, prompt, 8, tmp_path, extra=extra)
        assert res_u["token_ids"] == res_a["token_ids"], extra
        assert float(np.abs(la - lu).max()) <= 1e-5 * float(np.abs(lu).max()), extra


def test_toy_mla_rejection_reason_up_projection_bias(fuselm_bin, tmp_path):
    """An MLA-shaped module the fuser cannot absorb is rejected with its reason, and still runs."""
    names = dict(CONVENTIONAL)
    model_dir = tmp_path / "bias"

    class BiasLM(ToyLM):
        def __init__(self, n):
            super().__init__(n)
            mla = getattr(getattr(self, n["layers"])[1], n["attn"])
            setattr(mla, n["kv_b"], nn.Linear(R, NH * (DN + DV), bias=True))

    build_toy(names, model_dir, cls=BiasLM)
    r = inspect(fuselm_bin, model_dir)
    e = entry(r, "layers.1.self_attn", "mla")
    assert e["status"] == "rejected" and "up-projection has a bias" in e["detail"]
    assert r["kv_cache"]["layers"][1]["kind"] == "kv"
    prompt = [5, 6, 7, 8]
    _, lf = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 4, tmp_path)
    _, lu = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 4, tmp_path, extra=["--no-fuse"])
    assert float(np.abs(lf - lu).max()) <= 1e-5 * float(np.abs(lu).max())
