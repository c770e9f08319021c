"""The bf16 path (`--dtype bf16`) against fp32: greedy top-1 agreement, prefill and decode apart.

fuselm runs the model with bf16 weights (the linear kernels round activations to bf16 where the
ISA path multiplies in bf16: vdpbf16ps on avx512bf16, AMX tiles for prefill on amx; see
docs/engine.md). The oracle is transformers in fp32 (which fuselm's fp32 path matches to 1e-3, see
test_parity.py), run teacher-forced on fuselm's own bf16 tokens, so every row compares the same
inputs: the prompt rows are prefill (more than 8 rows: the bf16 GEMM), the generated rows are
decode steps (one row: the GEMV). Each part must agree on the top-1 token in at least
MIN_AGREEMENT (default model) or MIN_AGREEMENT_TINY (random weights: near-ties; measured 90-100%)
of its rows, on the default model (measured 100%) and on three tiny families (llama and qwen2: [n, k]
linear weights; gpt2: [k, n] Conv1D weights through addmm), on the best path of this CPU and,
for the tiny families, on the avx512bf16 path too (the CPU's best one where it lacks avx512bf16).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fuselm_runner
import tiny_models
from parity import hf_logits, hf_model

MIN_AGREEMENT = 0.95
MIN_AGREEMENT_TINY = 0.85
PROMPT_LEN = 100
NEW = 32
TINY = ["llama", "qwen2", "gpt2"]


def agreement(fuselm_bin: Path, model_dir: Path, prompt: list[int], tmp_path: Path, model) -> tuple[float, float]:
    """(prefill, decode) top-1 agreement of fuselm bf16 with transformers fp32 on fuselm's tokens."""
    result, ours = fuselm_runner.generate(fuselm_bin, model_dir, prompt, NEW, tmp_path, extra=["--dtype", "bf16"])
    assert len(result["token_ids"]) == NEW
    ref = hf_logits(model, prompt + result["token_ids"][:-1])
    assert ref.shape == ours.shape
    same = ours.argmax(-1) == ref.argmax(-1)
    return float(np.mean(same[:len(prompt)])), float(np.mean(same[len(prompt):]))


def check(name: str, prefill: float, decode: float, least: float) -> None:
    print(f"\n{name}: bf16 top-1 agreement with fp32: prefill {prefill:.1%} ({PROMPT_LEN} rows), "
          f"decode {decode:.1%} ({NEW - 1} steps)")
    assert prefill >= least, f"{name}: prefill agreement {prefill:.1%} < {least:.0%}"
    assert decode >= least, f"{name}: decode agreement {decode:.1%} < {least:.0%}"


@pytest.mark.parametrize("isa", ["best", "avx512bf16"])
@pytest.mark.parametrize("family", TINY)
def test_tiny_bf16_agrees_with_fp32(family, isa, fuselm_bin, model_cache, tmp_path, monkeypatch):
    model_dir = model_cache / family
    if not (model_dir / "config.json").exists():
        tiny_models.build(family, model_dir)
    if isa != "best":
        monkeypatch.setenv("FUSELM_CPU_ISA", isa)
    vocab = tiny_models.make_config(family).vocab_size
    prompt = [int(x) for x in np.random.default_rng(7).integers(0, vocab, size=PROMPT_LEN)]
    check(f"{family}/{isa}", *agreement(fuselm_bin, model_dir, prompt, tmp_path, hf_model(model_dir)),
          MIN_AGREEMENT_TINY)


def test_default_model_bf16_agrees_with_fp32(fuselm_bin, tmp_path):
    from test_smollm2_parity import PARAGRAPH
    from fuselm_capture import prepare_default

    model_dir = prepare_default.DEFAULT_OUT
    if not (model_dir / "config.json").exists():
        pytest.skip(f"{model_dir} is missing (scripts/prepare_default_model.sh prepares it)")
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(PARAGRAPH * 2).ids
    assert len(ids) >= PROMPT_LEN
    check("smollm2", *agreement(fuselm_bin, model_dir, ids[:PROMPT_LEN], tmp_path, hf_model(model_dir)),
          MIN_AGREEMENT)
