"""A GGUF's RoPE fields transformers' config mapping drops are put back (gguf_rope_config.py).

Each file is written as llama.cpp's converter writes its model (convert_hf_to_gguf: Phi3Model's
rope.dimension_count, rope.scaling.original_context_length, rope.scaling.attn_factor and the
long/short factor tensors; a linear scaling's rope.scaling.type and factor). The oracle is the
transformers model the file was made from, with its own RoPE config; each test first checks that
transformers loading the file itself (the fields dropped) is far from it, so the engine cannot pass
by dropping them too.
"""
from __future__ import annotations

import math
import os
import subprocess

import numpy as np
import torch

import test_gguf_families as families

ORIGINAL = 64
PROMPT = [int(x) for x in np.random.default_rng(3).integers(3, 250, size=ORIGINAL + 36)]  # past the original


def _ours(fuselm_bin, path, tmp_path, tmp_path_factory, prompt, vocab):
    """(fuselm's logits rows over prompt [len(prompt), vocab], its stderr)."""
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path_factory.mktemp("cache")))
    logits = tmp_path / "logits.f32"
    proc = subprocess.run([str(fuselm_bin), "generate", str(path), "--prompt-ids", ",".join(map(str, prompt)),
                           "--max-tokens", "4", "--ignore-eos", "--logits-out", str(logits)],
                          capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.fromfile(logits, dtype=np.float32).reshape(-1, vocab)[:len(prompt)], proc.stderr


def _far_and_close(fuselm_bin, path, oracle, tmp_path, tmp_path_factory, prompt):
    """Asserts transformers on the file is > 5 % of max|logit| from the oracle, and fuselm within 1e-3."""
    from transformers import AutoModelForCausalLM
    with torch.no_grad():
        dropped = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        far = dropped.eval()(torch.tensor([prompt])).logits[0].numpy()
        near = oracle(torch.tensor([prompt])).logits[0].numpy()
    assert np.abs(far - near).max() > 0.05 * np.abs(near).max(), "the dropped fields do not move the logits"
    ours, err = _ours(fuselm_bin, path, tmp_path, tmp_path_factory, prompt, near.shape[-1])
    assert np.abs(ours - near).max() <= 1e-3 * np.abs(near).max()
    return err


def test_phi3_longrope_partial_rotation(fuselm_bin, tmp_path, tmp_path_factory):
    """Phi-4-mini's shape: three quarters of each head rotated, longrope factors as tensors."""
    config = families._config("phi3")
    half = int(families.H // families.HEADS * 0.75) // 2
    config.original_max_position_embeddings = ORIGINAL
    config.partial_rotary_factor = 0.75
    config.rope_parameters = dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                  original_max_position_embeddings=ORIGINAL,
                                  long_factor=[1.0 + 0.6 * i for i in range(half)],
                                  short_factor=[1.0 + 0.05 * i for i in range(half)])
    scale = config.max_position_embeddings / ORIGINAL

    def metadata(w):  # as convert_hf_to_gguf's Phi3Model writes them
        w.add_rope_dimension_count(2 * half)
        w.add_rope_scaling_orig_ctx_len(ORIGINAL)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(ORIGINAL)))
        w.add_pad_token_id(0)

    path = tmp_path / "phi3-longrope.gguf"
    factors = {"rope_factors_long.weight": np.array(config.rope_parameters["long_factor"]),
               "rope_factors_short.weight": np.array(config.rope_parameters["short_factor"])}
    oracle = families.write_gguf("phi3", "F32", path, config=config, extra=factors, metadata=metadata)
    err = _far_and_close(fuselm_bin, path, oracle, tmp_path, tmp_path_factory, PROMPT)
    assert "partial_rotary_factor 0.75" in err and "RoPE scaling longrope" in err, err[-2000:]


def test_heads_narrower_than_hidden_over_heads(fuselm_bin, tmp_path, tmp_path_factory):
    """Mistral-Nemo's shape (a llama file, head_dim 128 < 5120 / 32): attention.key_length is the head
    size transformers' llama mapping leaves out (its model of the file does not even load)."""
    config = families._config("llama")
    config.head_dim = families.H // families.HEADS // 2
    path = tmp_path / "narrow-heads.gguf"
    oracle = families.write_gguf("llama", "F32", path, config=config)
    prompt = PROMPT[:24]
    with torch.no_grad():
        near = oracle(torch.tensor([prompt])).logits[0].numpy()
    ours, err = _ours(fuselm_bin, path, tmp_path, tmp_path_factory, prompt, near.shape[-1])
    assert np.abs(ours - near).max() <= 1e-3 * np.abs(near).max()
    assert f"head_dim {config.head_dim}" in err, err[-2000:]


def test_linear_scaling(fuselm_bin, tmp_path, tmp_path_factory):
    import gguf
    config = families._config("qwen2")
    config.rope_parameters = dict(rope_type="linear", rope_theta=10000.0, factor=4.0)

    def metadata(w):
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(4.0)

    path = tmp_path / "linear.gguf"
    oracle = families.write_gguf("qwen2", "F32", path, config=config, metadata=metadata)
    _far_and_close(fuselm_bin, path, oracle, tmp_path, tmp_path_factory, PROMPT[:24])


def test_a_scaling_the_config_cannot_carry_is_refused(fuselm_bin, tmp_path, tmp_path_factory):
    import gguf

    def metadata(w):  # DeepSeek-style yarn: an attention scale transformers' config has no field for here
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
        w.add_rope_scaling_yarn_log_mul(0.1)

    path = tmp_path / "yarn-log.gguf"
    families.write_gguf("qwen2", "Q8_0", path, metadata=metadata)
    last = families.refusal(fuselm_bin, path, tmp_path_factory)
    assert "rope.scaling.yarn_log_multiplier" in last, last


class _Field:
    def __init__(self, value):
        self.value = value

    def contents(self):
        return self.value


class _Reader:
    """The metadata part of gguf.GGUFReader: fields by key, no tensors."""

    def __init__(self, arch: str, **fields):
        self.fields = {"general.architecture": _Field(arch)} | {
            f"{arch}.{k.replace('__', '.')}": _Field(v) for k, v in fields.items()}
        self.tensors = []


def test_per_layer_type_scaling_goes_to_the_layers_of_the_files_base():
    """Gemma 3 4B's RoPE (linear x8 on its full-attention layers, base 1e6; sliding ones at 1e4,
    unscaled) as its GGUF states it: the completed config equals the one transformers declares."""
    from transformers import Gemma3TextConfig

    from fuselm_capture.gguf_rope_config import complete_rope
    declared = Gemma3TextConfig(rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    built = Gemma3TextConfig()  # what transformers' GGUF mapping leaves: no scaling
    notes = complete_rope(built, _Reader("gemma3", rope__freq_base=1e6, rope__scaling__type="linear",
                                         rope__scaling__factor=8.0, rope__dimension_count=256))
    assert built.rope_parameters == declared.rope_parameters
    assert notes == ["RoPE scaling linear for the full_attention layers"]


def test_layer_types_the_bases_do_not_tell_apart_are_refused():
    import pytest
    from transformers import Gemma3TextConfig

    from fuselm_capture.gguf_rope_config import GgufRopeRefused, complete_rope
    config = Gemma3TextConfig(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    with pytest.raises(GgufRopeRefused, match="cannot be told by their bases"):
        complete_rope(config, _Reader("gemma3", rope__freq_base=1e4, rope__scaling__type="linear",
                                      rope__scaling__factor=8.0))


def test_head_size_from_key_length():
    from transformers import LlamaConfig

    from fuselm_capture.gguf_rope_config import GgufRopeRefused, complete_head_size
    config = LlamaConfig(hidden_size=64, num_attention_heads=4)
    assert complete_head_size(config, _Reader("llama", attention__key_length=8)) == ["attention.key_length 8: head_dim 8"]
    assert config.head_dim == 8
    import pytest
    with pytest.raises(GgufRopeRefused, match="value_length 4 differs"):
        complete_head_size(LlamaConfig(hidden_size=64, num_attention_heads=4),
                           _Reader("llama", attention__key_length=8, attention__value_length=4))


def test_random_metadata_is_placed_or_refused_in_one_line():
    """A property test over the fields complete_head_size and complete_rope read, drawn at random
    (missing, wrong types, zero, negative, NaN, huge, strings, lists) on configs with one RoPE and
    with RoPE per layer type: each call places them or raises GgufRopeRefused, never another error."""
    import random

    from transformers import Gemma3TextConfig, LlamaConfig, Phi3Config

    from fuselm_capture.gguf_rope_config import GgufRopeRefused, complete_head_size, complete_rope
    values = [None, 0, -1, 1, 8, 16, 64, 1e30, float("nan"), float("inf"), 2.5, "linear", "yarn", "su", "", [1, 2]]
    keys = ["rope__dimension_count", "rope__freq_base", "rope__scaling__type", "rope__scaling__factor",
            "rope__scaling__original_context_length", "rope__scaling__attn_factor", "rope__scaling__yarn_log_multiplier",
            "rope__scaling__yarn_beta_fast", "rope__scaling__alpha", "attention__key_length", "attention__value_length"]
    r = random.Random(0)
    for _ in range(1500):
        config = r.choice([LlamaConfig, Phi3Config, Gemma3TextConfig])(hidden_size=64, num_attention_heads=4)
        fields = {k: v for k in keys if r.random() < 0.4 and (v := r.choice(values)) is not None}
        reader = _Reader("gemma3" if isinstance(config, Gemma3TextConfig) else "llama", **fields)
        if r.random() < 0.3:
            n = r.choice([0, 4, 8])
            reader.tensors = [_Tensor("rope_factors_long.weight", np.full(n, r.choice([1.0, 0.0, np.nan]))),
                              _Tensor("rope_factors_short.weight", np.ones(r.choice([n, 8])))]
        for complete in (complete_head_size, complete_rope):
            try:
                complete(config, reader)
            except GgufRopeRefused:
                pass
        placed = config.rope_parameters
        for p in placed.values() if all(isinstance(v, dict) for v in placed.values()) else [placed]:
            numbers = [v for k, v in p.items() if k != "rope_type"] + p.get("long_factor", []) + p.get("short_factor", [])
            numbers = [v for v in numbers if not isinstance(v, list)]
            assert all(math.isfinite(v) and v > 0 for v in numbers), p  # nothing NaN, zero or negative placed


class _Tensor:
    def __init__(self, name, data):
        self.name, self.data = name, data
