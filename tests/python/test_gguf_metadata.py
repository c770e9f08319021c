"""Every architecture field of a GGUF's metadata is checked against the config capture builds,
and placed where transformers' mapping dropped it (python/fuselm_capture/gguf_metadata.py).

The fields are written as llama.cpp's converter writes them (the names of gguf-py's Keys); the
oracle for each placed value is the transformers config class declaring it. The end-to-end check,
files made by llama.cpp's own converter against the models they came from, is
test_gguf_converted.py; the real checkpoints at the end must pass with nothing placed.
"""
from __future__ import annotations

import math
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from test_gguf_rope_config import _Reader  # noqa: E402

from fuselm_capture.gguf_metadata import FIELDS, GgufMetadataRefused, checked_config  # noqa: E402


def _checked(model_type: str, arch: str, mapped: dict | None = None, **fields):
    from transformers import AutoConfig
    return checked_config(_Reader(arch, **fields), dict(mapped or {}),
                          lambda kwargs: AutoConfig.for_model(model_type, **kwargs))


def test_logit_soft_caps_the_mapping_drops_are_placed():
    """A Gemma 2 file's soft-caps (convert_hf_to_gguf writes both; transformers' gemma2 mapping
    reads neither, so its config kept the class's 50 and 30)."""
    from transformers import Gemma2Config
    config, notes = _checked("gemma2", "gemma2", attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
    declared = Gemma2Config(attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
    assert (config.attn_logit_softcapping, config.final_logit_softcapping) == (5.0, 3.0)
    assert config.to_dict() == declared.to_dict()
    assert [n.split(":")[0] for n in notes] == ["attn_logit_softcapping 5.0", "final_logit_softcapping 3.0"]
    config, notes = _checked("gemma2", "gemma2", attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    assert notes == []  # the class's own values: nothing to place


def test_rope_bases_the_mapping_drops_are_placed():
    """StarCoder2's rope.freq_base (its mapping has no such field) and Gemma 3's sliding-layer base
    rope.freq_base_swa, each into the rope_parameters entry transformers declares it in."""
    from transformers import Gemma3TextConfig
    config, notes = _checked("starcoder2", "starcoder2", rope__freq_base=1e6)
    assert config.rope_parameters["rope_theta"] == 1e6 and len(notes) == 1
    config, _ = _checked("gemma3_text", "gemma3", {"rope_theta": 1e6}, rope__freq_base=1e6, rope__freq_base_swa=20.0)
    declared = Gemma3TextConfig(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                                 "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}})
    assert config.rope_parameters == declared.rope_parameters


def test_a_shape_the_mapping_drops_is_placed_and_one_with_no_field_is_left_to_the_tensors():
    config, notes = _checked("qwen3_moe", "qwen3moe", expert_feed_forward_length=32)
    assert config.moe_intermediate_size == 32 and "moe_intermediate_size 32" in notes[0]
    # Bloom's config has no feed-forward width (4 x hidden, fixed): the tensor plan checks it.
    config, notes = _checked("bloom", "bloom", feed_forward_length=256, attention__head_count=8,
                             attention__head_count_kv=8)
    assert notes == []
    # A zero where a part is absent (llama.cpp writes 0 for a Mamba file's FFN and heads).
    config, notes = _checked("mamba", "mamba", feed_forward_length=0, attention__head_count=0, ssm__dt_b_c_rms=False)
    assert notes == [] and config.intermediate_size == 2 * config.hidden_size


@pytest.mark.parametrize("model_type,arch,fields,names", [
    # FalconMamba's files are mamba files whose dt, B and C are RMS-normed; MambaConfig cannot say so.
    ("mamba", "mamba", {"ssm__dt_b_c_rms": True}, "ssm.dt_b_c_rms"),
    ("llama", "llama", {"attention__causal": False}, "attention.causal"),
    ("bloom", "bloom", {"attention__head_count": 8, "attention__head_count_kv": 2}, "attention.head_count_kv"),
    ("llama", "llama", {"expert_weights_scale": 2.5}, "expert_weights_scale"),
    ("llama", "llama", {"swin_norm": True}, "swin_norm"),  # a field fuselm has no rule for
    ("llama", "llama", {"attention__head_count": [4, 4, 2, 2]}, "attention.head_count"),
    ("llama", "llama", {"attention__sliding_window": -3}, "attention.sliding_window"),
])
def test_a_field_the_config_cannot_carry_is_refused_naming_it(model_type, arch, fields, names):
    with pytest.raises(GgufMetadataRefused, match=names.replace(".", r"\.")):
        _checked(model_type, arch, **fields)


def test_neutral_values_with_no_field_are_accepted():
    config, notes = _checked("llama", "llama", attention__causal=True, expert_weights_scale=1.0,
                             rope__scaling__finetuned=False, rope__scaling__yarn_ext_factor=1.0,
                             rope__scale_linear=1.0, tensor_data_layout="Meta AI original pth")
    assert notes == []
    with pytest.raises(GgufMetadataRefused, match="tensor_data_layout = 'jploski'"):
        _checked("falcon", "falcon", tensor_data_layout="jploski")
    with pytest.raises(GgufMetadataRefused, match="rope.scale_linear = 4.0"):
        _checked("llama", "llama", rope__scale_linear=4.0)


def test_random_fields_are_placed_or_refused_in_one_line():
    """A property test: random known and unknown fields with random values (wrong types, zero,
    negative, NaN, huge, strings, lists) over several config classes. Every call returns a config
    or raises GgufMetadataRefused, never another error, and a placed number is finite."""
    from transformers import AutoConfig
    values = [0, 1, 2, -1, 7, 64, 1e30, float("nan"), float("inf"), 0.5, True, False, "softmax", "", [1, 2], [3, 3]]
    keys = list(FIELDS) + ["made.up", "expert_gating_func"]
    types = [("llama", "llama"), ("gemma2", "gemma2"), ("gemma3_text", "gemma3"), ("qwen3_moe", "qwen3moe"),
             ("mamba", "mamba"), ("bloom", "bloom"), ("starcoder2", "starcoder2")]
    r = random.Random(0)
    for _ in range(400):
        model_type, arch = r.choice(types)
        fields = {k: r.choice(values) for k in r.sample(keys, r.randint(1, 4))}
        reader = _Reader(arch)
        reader.fields |= {f"{arch}.{k}": type(next(iter(reader.fields.values())))(v) for k, v in fields.items()}
        try:
            config, notes = checked_config(reader, {}, lambda kw: AutoConfig.for_model(model_type, **kw))
        except GgufMetadataRefused as e:
            assert "\n" not in str(e)
            continue
        for line in notes:
            attr = line.split(": ", 1)[1].split(" ")[0]
            value = getattr(config, attr, None) if "[" not in attr and "." not in attr else None
            assert not isinstance(value, float) or math.isfinite(value), (fields, line)


REAL = Path(os.environ.get("FUSELM_REAL_CACHE", Path.home() / ".cache" / "fuselm" / "real"))


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf",
                                  "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"])
def test_real_files_agree_with_their_config(name):
    """Real files (scripts/fetch_real_checkpoints.sh) pass with nothing placed: their converter
    wrote only fields the mapping reads or the class default already holds."""
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{path} is absent (scripts/fetch_real_checkpoints.sh fetches it)")
    from fuselm_capture.gguf_source import gguf_config
    notes: list[str] = []
    gguf_config(path, notes)
    assert notes == []


def test_every_rule_names_attributes_or_says_why_it_needs_none():
    """A rule with no attribute must accept something (a neutral value, a shape or information);
    a rule that can place must name where."""
    for key, spec in FIELDS.items():
        assert spec.attrs or spec.info or spec.shape or spec.neutral is not None, key
        assert all(isinstance(a, str) and a for a in spec.attrs), key
    assert not set(np.unique([k.split(".")[0] for k in FIELDS])) & {"general", "tokenizer"}
