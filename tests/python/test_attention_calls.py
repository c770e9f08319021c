"""A module that calls attention twice per layer holds two KV layers, and runs as transformers does.

Capture numbers the fuselm.attention calls in graph order, each its own KV layer (one K/V set in
the engine's cache), whatever module made the call (python/fuselm_capture/ops.py,
number_attention_calls). DiffLlama's differential attention calls it twice per layer, over one K
and two halves of V: a one-layer tiny DiffLlama gets two KV layers (`fuselm inspect --json`'s
kv_cache), the attention fuser reports both sites in call order, and fuselm's greedy tokens and
logits equal transformers' on prompts of 1 and 7 tokens (parity.check_parity). The other families
that call attention more than once per layer (hrm_text, zamba, zamba2) run in long mode:
test_hybrid_parity.py; a one-layer hrm_text runs here at one prompt length for its checkpoint,
which save_pretrained writes with the gate, q, k and v projections packed into one gqkv_proj
(transformers' Chunk(dim=0) conversion): each parameter reads its chunk of that tensor. The other
way round, calls over the very same K/V as an earlier call (Gemma 3n's KV sharing) share its KV
layer.
"""
from __future__ import annotations

import json
import subprocess

import numpy as np

import hybrid_models
from parity import check_parity, hf_model


def test_two_attention_calls_per_layer_get_two_kv_layers_and_match_transformers(fuselm_bin, model_cache, tmp_path):
    family = "diffllama"
    cls, overrides = hybrid_models.ATTENTION_CALLS[family]
    hybrid_models.ATTENTION_CALLS["diffllama_1layer"] = (cls, dict(overrides, num_hidden_layers=1))
    d = model_cache / "diffllama_1layer"
    if not (d / "config.json").exists():
        hybrid_models.build("diffllama_1layer", d)
    proc = subprocess.run([str(fuselm_bin), "inspect", str(d), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    layers = report["kv_cache"]["layers"]
    # 2 KV heads of 16 for K; V of the same width (each call reads two of the 2 x 2 halves' heads).
    assert [(l["layer"], l["kind"], l["k_width"], l["v_width"]) for l in layers] == [(0, "kv", 32, 32), (1, "kv", 32, 32)]
    site = next(e for e in report["modules"] if e["module"] == "model.layers.0.self_attn" and e["fuser"] == "attention")
    assert site["status"] == "fused"
    assert site["detail"].startswith("layer=0 (call order)") and "; layer=1 (call order)" in site["detail"], site

    model = hf_model(d)
    rng = np.random.default_rng(7)
    for length in (1, 7):
        prompt = [int(x) for x in rng.integers(0, model.config.vocab_size, size=length)]
        check_parity(f"diffllama_1layer/{length}", fuselm_bin, d, prompt, tmp_path, model=model)


def test_packed_checkpoint_tensor_is_read_in_chunks(fuselm_bin, model_cache, tmp_path):
    d = model_cache / "hrm_text_packed"
    if not (d / "config.json").exists():
        hybrid_models.build("hrm_text", d)
    from safetensors import safe_open
    with safe_open(str(d / "model.safetensors"), "np") as f:
        assert any(k.endswith("attn.gqkv_proj.weight") for k in f.keys())  # what transformers saved
    model = hf_model(d)
    prompt = [int(x) for x in np.random.default_rng(11).integers(0, model.config.vocab_size, size=7)]
    check_parity("hrm_text_packed/7", fuselm_bin, d, prompt, tmp_path, model=model)


def test_layers_attending_over_an_earlier_layers_kv_share_its_cache_layer(fuselm_bin, model_cache, tmp_path):
    """KV sharing: Gemma 3n's layers 2 and 3 attend over the K/V of layers 0 (sliding) and 1 (full)
    (num_kv_shared_layers=2 of 4): two KV layers, not four, and greedy tokens and logits equal
    transformers' over a prompt longer than the sliding window, decode steps included."""
    import tiny_models
    d = model_cache / "gemma3n_text"
    if not (d / "config.json").exists():
        tiny_models.build("gemma3n_text", d)
    proc = subprocess.run([str(fuselm_bin), "inspect", str(d), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    layers = json.loads(proc.stdout)["kv_cache"]["layers"]
    assert [(l["layer"], l["kind"]) for l in layers] == [(0, "kv"), (1, "kv")], layers
    prompt = [int(x) for x in np.random.default_rng(40).integers(0, 512, size=40)]
    check_parity("gemma3n_text/40", fuselm_bin, d, prompt, tmp_path, model=hf_model(d))


def test_an_attention_call_passing_a_tensor_the_op_does_not_take_is_refused():
    """A relative position bias handed to the attention interface (Inkling's `position_bias`) would be
    dropped by fuselm's attention op: capture refuses the call, naming it, instead of running it
    without the bias (Inkling then falls back to its eager attention, which is refused by structure)."""
    import pytest
    import torch
    from fuselm_capture import ops

    class Attn(torch.nn.Module):
        layer_idx = 3

    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ops.MaskCaptureError, match=r"Attn \(layer 3\) passes position_bias"):
        ops.attention_forward(Attn(), q, q, q, None, position_bias=torch.zeros(1, 2, 4, 4))
    # The positions are the engine's own: passing them is no reason to refuse.
    try:
        ops.attention_forward(Attn(), q, q, q, None, position_ids=torch.arange(4)[None])
    except ops.MaskCaptureError as e:
        raise AssertionError(f"refused position_ids: {e}") from e
    except Exception:  # noqa: BLE001 - the op itself outside export: not what this checks
        pass
