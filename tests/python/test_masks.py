"""Masks read per layer (python/fuselm_capture/masks.py): the kind of each attention layer's mask
is read from transformers' own mask function and written into its fuselm.attention op.

- classify() on transformers' mask functions and on hand-made ones (the kinds, their sizes, and
  the functions it must not take for causal);
- a model whose only window is in its mask (qwen2_moe with use_sliding_window: the window is in
  the layer types and a module attribute, never passed to the attention call) runs with that
  window: parity with transformers on prompts past the window, which would fail without it;
- a graph whose mask the engine cannot express (a decoder configured bidirectional) is refused
  with an error naming the layer, never run as causal attention.
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch

import moe_models
import tiny_models
from parity import check_parity, hf_logits, hf_model

WINDOW = 8


def test_classify_reads_the_kind_from_the_function():
    from transformers import masking_utils as mu

    from fuselm_capture.masks import classify
    zeros = torch.zeros(1, dtype=torch.long)
    assert classify(mu.causal_mask_function).kind == "causal"
    for w in (1, 7, 4096):
        m = classify(mu.sliding_window_causal_mask_function(w))
        assert (m.kind, m.size) == ("sliding", w)
    for c in (16, 100, 8192):
        m = classify(mu.chunked_causal_mask_function(c, zeros))
        assert (m.kind, m.size) == ("chunked", c)
    # a window written by hand in an and_mask overlay, and a packed-sequence part (dropped)
    m = classify(mu.and_masks(mu.causal_mask_function, lambda b, h, q, k: k > q - 10))
    assert (m.kind, m.size) == ("sliding", 10)
    m = classify(mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(zeros[None])))
    assert m.kind == "causal"
    assert classify(mu.bidirectional_mask_function).kind == "bidirectional"
    assert classify(mu.sliding_window_bidirectional_mask_function(5)).kind == "bidirectional"
    # prefix-LM style: the first 3 keys visible to every query
    m = classify(mu.or_masks(mu.causal_mask_function, lambda b, h, q, k: k < 3))
    assert (m.kind, m.size) == ("bidirectional_prefix", 3)
    # every other key: no run of keys, so neither causal nor a window
    m = classify(mu.and_masks(mu.causal_mask_function, lambda b, h, q, k: k % 2 == 0))
    assert m.kind == "unknown"
    # a window that is only approximately sliding (wider far from the start) is not taken
    m = classify(mu.and_masks(mu.causal_mask_function, lambda b, h, q, k: k > q - (8 if q < 1000 else 9)))
    assert m.kind == "unknown", m


def sliding_qwen2_moe(model_cache, window: bool):
    name = f"qwen2_moe_window{WINDOW}" if window else "qwen2_moe_nowindow"
    d = model_cache / name
    if not (d / "config.json").exists():
        cls, overrides = moe_models.MOE_FAMILIES["qwen2_moe"]
        saved = dict(overrides)
        overrides.update(sliding_window=WINDOW, use_sliding_window=window, max_window_layers=2)
        try:
            moe_models.build("qwen2_moe", d)
        finally:
            overrides.clear()
            overrides.update(saved)
    return d


def attention_ops(model_dir) -> list[dict]:
    ir = json.loads((model_dir / "fuselm-ir" / "ir.json").read_text())
    names = ir["ops"]["fuselm.attention.default"]["args"]
    return [dict(zip(names, n["args"])) for n in ir["nodes"] if n["op"] == "fuselm.attention.default"]


def test_window_only_in_the_mask(fuselm_bin, model_cache, tmp_path):
    model_dir = sliding_qwen2_moe(model_cache, window=True)
    model = hf_model(model_dir)
    # The window is not in the attention call: transformers' attention module never passes it.
    assert model.config.layer_types == ["sliding_attention", "full_attention", "full_attention"]
    g = np.random.default_rng(5)
    prompt = [int(x) for x in g.integers(0, model.config.vocab_size, size=40)]
    # The oracle itself depends on the window for this prompt (so the test can fail without it):
    # the same weights with full attention give other logits past the window.
    full = hf_model(sliding_qwen2_moe(model_cache, window=False))
    assert np.abs(hf_logits(model, prompt)[WINDOW:] - hf_logits(full, prompt)[WINDOW:]).max() > 1e-2
    check_parity("qwen2_moe sliding", fuselm_bin, model_dir, prompt, tmp_path)
    ops = attention_ops(model_dir)
    assert [(o["mask"], o["sliding_window"], o["chunk_size"]) for o in ops] == [
        ("sliding", WINDOW, -1), ("causal", -1, -1), ("causal", -1, -1)]
    # prompts of 1 and 300 tokens: decode steps far past the window
    for n in (1, 300):
        prompt = [int(x) for x in g.integers(0, model.config.vocab_size, size=n)]
        check_parity(f"qwen2_moe sliding {n}", fuselm_bin, model_dir, prompt, tmp_path, model=model)


def test_unexpressible_mask_is_refused(fuselm_bin, model_cache, tmp_path):
    """A decoder configured bidirectional (config.is_causal = False: transformers then builds
    every mask with create_bidirectional_mask) cannot run in the engine: the error names the layer
    and the mask, and nothing is generated."""
    d = model_cache / "llama_bidirectional"
    if not (d / "config.json").exists():
        tiny_models.build("llama", d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["is_causal"] = False
        (d / "config.json").write_text(json.dumps(cfg))
    proc = subprocess.run([str(fuselm_bin), "generate", str(d), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("fuselm: error: "), proc.stderr
    assert "model.layers.0.self_attn (layer 0)" in last and "'bidirectional" in last, last
    assert "cannot express" in last, last
    ops = attention_ops(d)
    assert all(o["mask"].startswith("bidirectional") for o in ops), ops


def _by_hand_dir(model_cache, family: str):
    import transformers
    from transformers import AutoModelForCausalLM
    d = model_cache / f"{family}_by_hand"
    if not (d / "config.json").exists():
        cfg = {"bloom": lambda: transformers.BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4),
               "gpt_neo": lambda: transformers.GPTNeoConfig(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4,
                                                            attention_types=[[["local", "global"], 1]],
                                                            window_size=8, max_position_embeddings=256)}[family]()
        AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    return d


def test_attention_by_hand_with_a_bias_is_refused(fuselm_bin, model_cache):
    """transformers 5.18's bloom computes attention by hand with ALiBi through baddbmm: capture finds
    the attention (python/fuselm_capture/attn_by_hand.py) but its bias on the visible scores is no mask,
    so it is refused with one line naming the class, the module and the reason."""
    d = _by_hand_dir(model_cache, "bloom")
    proc = subprocess.run([str(fuselm_bin), "generate", str(d), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("fuselm: error: ") and "attention written by hand in transformer.h.0" in last, proc.stderr
    assert "ForCausalLM" in last and "adds a bias to the visible scores" in last, last


def test_attention_by_hand_window_is_read_from_the_graph(fuselm_bin, model_cache, tmp_path):
    """gpt_neo's local layers hide keys through a [C, C] buffer the forward slices; capture proves on
    probes that the layer's mask is a sliding window of 8 (the other layer causal) and writes it into
    the op, and the logits past the window match transformers'."""
    d = _by_hand_dir(model_cache, "gpt_neo")
    check_parity("gpt_neo_by_hand/20", fuselm_bin, d, list(range(1, 21)), tmp_path)  # 20 tokens: past the window
    ops = attention_ops(d)
    assert [(o["mask"], o["sliding_window"]) for o in ops] == [("sliding", 8), ("causal", -1)], ops


def test_a_mask_used_as_a_tensor_is_refused_by_name():
    """A model computing with its mask tensor (slicing it, reading .dtype) gets capture's reason,
    not an AttributeError about a fuselm class; hasattr() probes still answer False."""
    from fuselm_capture.masks import MaskKind, MaskReadAsTensor
    m = MaskKind("sliding", 16)
    assert not hasattr(m, "shape")
    with pytest.raises(MaskReadAsTensor, match=r"reads its attention mask as a tensor \(\.dtype\)"):
        m.dtype
    with pytest.raises(MaskReadAsTensor, match="indexed"):
        m[:, 0]
    assert m.describe() == "sliding 16"


def test_a_second_attention_call_of_one_layer_is_refused():
    """A module calling attention twice in one trace (differential attention: two value sets over
    one K) would share one KV-cache layer between the calls, so capture refuses it by name; a
    new trace (another fake mode) of the same module is a first call again."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from fuselm_capture import ops

    class Attn(torch.nn.Module):
        layer_idx = 3

    m = Attn()
    with FakeTensorMode() as mode:
        q = torch.empty(1, 4, 5, 8)
    ops._one_call_per_trace(m, q)
    with pytest.raises(ops.MaskCaptureError, match=r"Attn \(layer 3\) calls attention twice"):
        ops._one_call_per_trace(m, q)
    with FakeTensorMode():
        ops._one_call_per_trace(m, torch.empty(1, 4, 5, 8))
    del mode
