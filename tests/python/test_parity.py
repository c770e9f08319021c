"""Parity with transformers (the oracle) on tiny random-weight models of every supported family.

For prompts of 7 tokens (and of 1 and 300 in long mode, long_mode.py): fuselm's greedy 32 tokens equal transformers' greedy decoding,
and every logits row (prompt positions and decode steps) is within 1e-3 x max|logit| of
transformers' full forward over the same tokens. Where transformers' own top two logits are within
that tolerance (a true tie) either token is accepted; such ties are counted and printed.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import family_status
import long_mode
import fuselm_runner
import parity_cover
import tiny_models
from parity import NEW_TOKENS, REL_TOL, TIES, check_parity, hf_greedy, hf_logits, hf_model  # noqa: F401

# Prompt lengths per case: every family runs the 7-token prompt; 1 and 300 tokens in long mode.
LENGTHS = {"7": [7], "1_300": [1, 300]}


@pytest.fixture(scope="module")
def family_dirs(model_cache):
    return {}


def prompt_of(length: int, vocab: int, seed: int) -> list[int]:
    g = np.random.default_rng(seed)
    return [int(x) for x in g.integers(0, vocab, size=length)]


# The default run keeps the families of parity_cover.txt (together they hold every family's captured
# structures: op kinds and fuser matches); long mode runs every family and checks that cover below.
@pytest.mark.parametrize("lengths", long_mode.split(LENGTHS, default=["7"]))
@pytest.mark.parametrize("family", long_mode.split(family_status.params(tiny_models.FAMILIES),
                                                   default=parity_cover.read_default()))
def test_tiny_family_parity(family, lengths, fuselm_bin, model_cache, tmp_path):
    model_dir = model_cache / family
    if not (model_dir / "config.json").exists():
        tiny_models.build(family, model_dir)
    vocab = tiny_models.make_config(family).vocab_size
    worst = 0.0
    for length in LENGTHS[lengths]:
        worst = max(worst, check_parity(f"{family}/{length}", fuselm_bin, model_dir,
                                        prompt_of(length, vocab, seed=length), tmp_path))
    print(f"\n{family}: max relative logit difference {worst:.2e}; ties accepted: "
          f"{sum(v for k, v in TIES.items() if k.startswith(family + '/'))}")


def test_bf16_weights_top1_agreement(fuselm_bin, model_cache, tmp_path):
    """bf16 checkpoints run with bf16 weights (fp32 activations); report top-1 agreement."""
    model_dir = model_cache / "llama_bf16"
    if not (model_dir / "config.json").exists():
        tiny_models.build("llama", model_dir, dtype=torch.bfloat16)
    prompt = prompt_of(64, 512, seed=3)
    result, ours = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 16, tmp_path)
    model = hf_model(model_dir, dtype=torch.bfloat16)
    ref = hf_logits(model, prompt + result["token_ids"][:-1])
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"\nbf16 top-1 agreement with transformers (bf16): {agree:.1%} over {len(ref)} positions")
    assert agree >= 0.9


def test_long_parity_cover_is_complete(fuselm_bin, model_cache):
    """Every structure a family's captured graph holds is held by a family the default run keeps
    (parity_cover.py); runs after every family's parity case, on the graphs they captured."""
    dirs = {f: model_cache / f for f in tiny_models.FAMILIES}
    if not all((d / "fuselm-ir" / "ir.json").exists() for d in dirs.values()):
        pytest.skip("not every family was captured in this run (a -k filter?)")
    by_family = {f: parity_cover.structures(fuselm_bin, d) for f, d in dirs.items()}
    gaps = parity_cover.missing(by_family, parity_cover.read_default())
    assert not gaps, (f"structures no default family holds (rerun tests/python/parity_cover.py --models DIR --write): "
                      f"{ {f: sorted(s)[:5] for f, s in gaps.items()} }")
