"""GGUF files made by llama.cpp's own converter run as the models they were made from.

Tiny random models whose configs differ from their class defaults in a field transformers' GGUF
mapping drops are converted with convert_hf_to_gguf.py from the llama-cpp-python 0.3.36 sdist (the
tree test_tokenizer_spm caches; the converter runs on this venv's torch and transformers with the
tree's own gguf-py). The oracle is the transformers model each file came from; each test first
checks that transformers loading the file itself (the field dropped) is far from it, so fuselm
cannot pass by dropping it too. A file whose metadata says what the config cannot carry is refused
naming the field. The rule is python/fuselm_capture/gguf_metadata.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import test_gguf_families as families
import tiny_models
from test_gguf_rope_config import _far_and_close
from test_tokenizer_spm import CACHE, llama_cpp_sdist

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "models" / "SmolLM2-135M-Instruct"  # a byte-level BPE the converter recognises
TREE = "llama_cpp_python-0.3.36/vendor/llama.cpp"
PROMPT = [int(x) for x in np.random.default_rng(3).integers(3, 250, size=40)]
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=49152, max_position_embeddings=512, tie_word_embeddings=True)


@pytest.fixture(scope="session")
def converter() -> Path:
    """convert_hf_to_gguf.py with its conversion/ package and gguf-py, from the cached sdist."""
    out = CACHE / "llamacpp-convert"
    script = out / TREE / "convert_hf_to_gguf.py"
    if not script.exists():
        tarball = llama_cpp_sdist("llama.cpp's convert_hf_to_gguf.py; converted GGUF files not checked")
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if m.name == f"{TREE}/convert_hf_to_gguf.py"
                       or m.name.startswith((f"{TREE}/conversion/", f"{TREE}/gguf-py/"))]
            tar.extractall(out, members=members, filter="data")
    return script


def _convert(converter: Path, family: str, config: dict, out: Path) -> tuple[Path, object]:
    """(the GGUF llama.cpp's converter makes of a tiny random `family` model, that model)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    if not (TOKENIZER / "tokenizer.json").exists():
        pytest.skip(f"{TOKENIZER} is not prepared (scripts/prepare_default_model.sh)")
    known = AutoConfig.for_model(family).to_dict()
    cfg = AutoConfig.for_model(family, **{k: v for k, v in {**SMALL, **config}.items() if k in known or k in config})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    tiny_models.randomize(model, 0.1)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((TOKENIZER / name).read_bytes())
    env = dict(os.environ, PYTHONPATH=str(converter.parent / "gguf-py"))
    proc = subprocess.run([sys.executable, str(converter), str(out), "--outtype", "f32", "--outfile", str(out / "m.gguf")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "m.gguf", model


@pytest.mark.parametrize("family,config,placed", [
    # StarCoder2-3B's base is 999999.4; its mapping has no rope.freq_base (the class default is 1e4).
    ("starcoder2", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "rope.freq_base 1000000.0"),
    # Gemma 3's sliding layers' base (rope.freq_base_swa); six layers: llama.cpp's fixed pattern.
    ("gemma3_text", {"num_hidden_layers": 6, "sliding_window": 16, "query_pre_attn_scalar": 256,
                     "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}}},
     "rope.freq_base_swa 20.0"),
])
def test_converted_file_runs_as_its_model(fuselm_bin, converter, family, config, placed, tmp_path, tmp_path_factory):
    path, oracle = _convert(converter, family, config, tmp_path / family)
    err = _far_and_close(fuselm_bin, path, oracle, tmp_path, tmp_path_factory, PROMPT)
    assert f"the file's {placed}" in err, err[-2000:]


def test_a_field_the_config_cannot_carry_is_refused(fuselm_bin, converter, tmp_path, tmp_path_factory):
    """FalconMamba: the converter writes a mamba file with ssm.dt_b_c_rms (RMS norms on dt, B and C)
    that transformers' MambaConfig cannot say; transformers runs the file without them."""
    path, _ = _convert(converter, "falcon_mamba", {"state_size": 8}, tmp_path / "falcon_mamba")
    last = families.refusal(fuselm_bin, path, tmp_path_factory)
    assert "ssm.dt_b_c_rms = True" in last and str(path) in last, last
