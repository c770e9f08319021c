"""Parity of families the sweep (scripts/family_sweep.py) brought in, built as the sweep builds them
(a tiny random-weight config of the installed transformers' defaults, with per-case overrides), run
by `fuselm generate` against transformers (tests/python/parity.check_parity: greedy tokens, logits
within 1e-3 x max|logit|, KV-cache decode steps included). Long mode only (scripts/test.sh --long,
FUSELM_LONG=1): each case builds and captures a model of its own.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

LONG = os.environ.get("FUSELM_LONG") == "1"
pytestmark = pytest.mark.skipif(not LONG, reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")

# name -> (model_type, config overrides, prompt lengths)
CASES = {
    # Llama 4's text model with its defaults (chunked attention, NoPE layers, MoE) over 300 tokens.
    # Its temperature tuning (arange(T) read as the position input) acts only past floor_scale (8192
    # tokens) here; test_moe's llama4_text config makes it act within a short prompt.
    "llama4_text": ("llama4_text", {}, [7, 300]),
    # One attention module shared by three hybrid layers (1, 3, 4), each call naming its cache layer
    # by a layer_idx argument (the module's own layer_idx is -1), between Mamba-2 layers.
    "zamba2_shared_attention": ("zamba2", {"num_hidden_layers": 6, "hybrid_layer_ids": [1, 3, 4],
                                           "layers_block_type": ["linear_attention", "hybrid", "linear_attention",
                                                                 "hybrid", "hybrid", "linear_attention"]}, [7, 40]),
}


def _build(name: str, model_cache: Path) -> Path:
    import family_sweep
    model_type, overrides, _ = CASES.get(name, (name, {}, []))
    out = model_cache / f"sweep-{name}"
    if not (out / "config.json").exists():
        family_sweep.build(model_type, out, overrides=overrides)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_long_sweep_parity(name, fuselm_bin, model_cache, tmp_path):
    import parity
    model_dir = _build(name, model_cache)
    model = parity.hf_model(model_dir)
    vocab = model.config.get_text_config().vocab_size
    worst = 0.0
    for n in CASES[name][2]:
        prompt = [int(x) for x in np.random.default_rng(n).integers(0, vocab, size=n)]
        worst = max(worst, parity.check_parity(f"{name}/{n}", fuselm_bin, model_dir, prompt, tmp_path, model=model))
    print(f"\n{name}: worst rel logit diff {worst:.2e}")
