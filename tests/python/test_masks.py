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


def test_long_window_only_in_the_mask(fuselm_bin, model_cache, tmp_path):
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


def test_alibi_slopes_are_read_from_the_graph(fuselm_bin, model_cache, tmp_path):
    """transformers 5.18's bloom computes attention by hand with an ALiBi bias through baddbmm:
    capture proves on probes that the bias is slope[h] x key position and writes the slopes into
    each layer's op; they equal transformers' own build_alibi_tensor slopes, and the logits past the
    first tokens (where the bias matters) match transformers'. (A config without a context bound,
    as bloom's own has none, runs at 2048 tokens: masks by hand are proved up to there.)"""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    d = model_cache / "bloom"  # as the parity test builds it (a context bound of 1024 in its config)
    if not (d / "config.json").exists():
        tiny_models.build("bloom", d)
    cfg = tiny_models.make_config("bloom")
    check_parity("bloom/40", fuselm_bin, d, list(range(3, 43)), tmp_path, max_tokens=4)
    want = build_alibi_tensor(torch.ones(1, 2), cfg.n_head, torch.float32)[:, 0, 1].tolist()  # slope x position 1
    ops = attention_ops(d)
    assert len(ops) == cfg.n_layer and all(o["mask"] == "causal" for o in ops), ops
    for o in ops:
        assert o["alibi_slopes"] == pytest.approx(want, rel=1e-6), (o["alibi_slopes"], want)


def test_unbounded_context_by_hand_runs_at_the_proved_bound(fuselm_bin, model_cache, tmp_path):
    """bloom's own config sets no context bound (ALiBi has no position table). Masks written by hand
    are proved on probes of up to 2048 tokens, so the checkpoint runs as it is, with no config edit,
    at a context of 2048 tokens, which capture says in one line: greedy tokens and logits equal
    transformers', and a prompt of 2048 tokens is refused by the context's error."""
    d = _by_hand_dir(model_cache, "bloom")
    assert "max_position_embeddings" not in json.loads((d / "config.json").read_text())
    proc = subprocess.run([str(fuselm_bin), "generate", str(d), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "context bounded at 2048 tokens" in proc.stderr and "names no context length" in proc.stderr, proc.stderr
    check_parity("bloom-unbounded/40", fuselm_bin, d, list(range(3, 43)), tmp_path, max_tokens=4)
    long = subprocess.run([str(fuselm_bin), "generate", str(d), "--prompt-ids", ",".join(["5"] * 2048),
                           "--max-tokens", "1", "--json"], capture_output=True, text=True, timeout=600)
    assert long.returncode != 0 and "2048" in long.stderr.strip().splitlines()[-1], long.stderr


def test_alibi_rounded_to_16_bits_is_refused(fuselm_bin, model_cache):
    """falcon's alibi=True variant multiplies bfloat16 slopes by the key positions, so its bias is a
    line only to bfloat16 rounding: the engine's exact ALiBi would not give the model's logits, and
    capture refuses it in one line naming the module and why."""
    import transformers
    from transformers import AutoModelForCausalLM
    d = model_cache / "falcon_alibi"
    if not (d / "config.json").exists():
        torch.manual_seed(0)
        cfg = transformers.FalconConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                        alibi=True, new_decoder_architecture=False, multi_query=True,
                                        parallel_attn=True)
        AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    proc = subprocess.run([str(fuselm_bin), "generate", str(d), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("fuselm: error: ") and "attention written by hand in transformer.h.0" in last, proc.stderr
    assert "only to the rounding of a 16-bit float" in last, last


def test_grouped_attention_by_hand_caches_unique_kv_heads(fuselm_bin, model_cache, tmp_path):
    """falcon's new decoder architecture repeats its 2 KV heads to the 4 query heads (broadcast_to,
    then a reshape) before its hand-written products: capture proves by dataflow that the repeated
    heads are copies, so the KV cache holds 2 heads a layer (the size grouped attention needs,
    half of the repeated one), and the logits still match transformers'."""
    d = model_cache / "falcon_new"
    if not (d / "config.json").exists():
        tiny_models.build("falcon_new", d)
    cfg = tiny_models.make_config("falcon_new")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    check_parity("falcon_new/20", fuselm_bin, d, list(range(5, 25)), tmp_path, max_tokens=4)
    proc = subprocess.run([str(fuselm_bin), "inspect", str(d), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    kv = json.loads(proc.stdout)["kv_cache"]
    assert [(lay["k_width"], lay["v_width"]) for lay in kv["layers"]] == \
        [(cfg.num_kv_heads * head_dim, cfg.num_kv_heads * head_dim)] * cfg.num_hidden_layers, kv
    assert kv["bytes_per_token"] == cfg.num_hidden_layers * 2 * cfg.num_kv_heads * head_dim * 4
    assert cfg.num_kv_heads < cfg.num_attention_heads


def _bias_forms(T=40, H=3):
    """(visible [T, T] causal, slopes [H], key positions k [T], query positions q [T, 1])."""
    q = torch.arange(T, dtype=torch.float64)[:, None]
    k = torch.arange(T, dtype=torch.float64)[None, :]
    slopes = torch.tensor([0.5, 0.125, 0.0], dtype=torch.float64)[:H]
    return k <= q, slopes, k, q


def test_alibi_proof_accepts_key_position_and_distance_forms():
    """Both slope·k (bloom) and slope·(k - q), with any constant per query row, give the slopes; a
    softmax over keys of either equals one over the other (the invariance the proof relies on)."""
    from fuselm_capture.attn_by_hand import _alibi_slopes
    vis, slopes, k, q = _bias_forms()
    forms = {"key": slopes[:, None, None] * k, "distance": slopes[:, None, None] * (k - q),
             "row": slopes[:, None, None] * k + 7.0 * q.sin()}
    for name, b in forms.items():
        b32 = b.float().double()  # computed in the model's fp32
        assert _alibi_slopes(b32, vis, torch.float32) == pytest.approx(slopes.tolist(), abs=1e-7), name
        masked = b.masked_fill(~vis, float("-inf"))
        ref = forms["distance"].masked_fill(~vis, float("-inf"))
        assert torch.allclose(torch.softmax(masked, -1), torch.softmax(ref, -1), atol=1e-12), name


def test_alibi_proof_refuses_other_biases():
    """A bias that is not linear in the key position (quadratic, a learned table, a slope that
    changes with the query row) is refused, as is a line rounded to bfloat16."""
    from fuselm_capture.attn_by_hand import Refused, _alibi_slopes
    vis, slopes, k, q = _bias_forms()
    g = torch.Generator().manual_seed(0)
    bad = {"quadratic": slopes[:, None, None] * k * k / 40,
           "table": torch.randn(3, 1, 40, generator=g, dtype=torch.float64).expand(3, 40, 40),
           "per-row slope": slopes[:, None, None] * k * (1 + q / 40)}
    for name, b in bad.items():
        with pytest.raises(Refused, match="not an ALiBi bias"):
            _alibi_slopes(b, vis, torch.float32)
    vis, slopes, k, q = _bias_forms(T=300)  # slope 0.5 x 299 needs 9 significant bits: bfloat16 rounds it
    rounded = (slopes[:, None, None].bfloat16() * k.bfloat16()).double().expand(3, 300, 300)
    assert not torch.equal(rounded[0], (slopes[0] * k).expand(300, 300))
    with pytest.raises(Refused, match="16-bit float"):
        _alibi_slopes(rounded, vis, torch.float32)


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
