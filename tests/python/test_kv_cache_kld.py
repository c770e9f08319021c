"""The KV cache's dtype against an f32 cache: KL divergence and greedy agreement over a fixed text.

The default model (SmolLM2-135M-Instruct, real weights, f32) reads the first TOKENS tokens of
tests/data/text/declaration_and_gettysburg.txt (public-domain American texts, tokenized with the
model's tokenizer.json by the tokenizers package) teacher-forced: one `fuselm generate` prefill that
writes the logits of every position (--logits-out), so every position's attention reads the cache
written in the dtype under test, as llama.cpp's `perplexity --kl-divergence` does. Per position,
KL(P_f32 || P_x) of the next-token distributions (log-softmax in float64) and whether the top-1
tokens agree, for --kv-cache-dtype bf16 and q8_0 against --kv-cache-dtype f32. llama.cpp's #7412
measured mean KLD 0.0002 (f16 K+V) and 0.0016 (q8_0 K+V) against f16 on larger models.

Measured here (Intel Xeon with AMX, amx path, 2048 tokens): see BOUNDS' comment.

A latent-attention (MLA) model stores one row [latent | rope key] per token; q8_0 pads the two
parts to whole 32-blocks apart. Its case runs the tiny DeepSeek-V2-style fixture of mla_models.py
(latent 32, rope key 8: 1 + 1 blocks) teacher-forced over MLA_TOKENS fixed random token ids. One
prefill that long takes MLA's expanded form; the absorbed form (decode, short chunks) reads the
same rows through the attention kernels, checked against a reference on every ISA path by
tests/cpp/kernels_mla_cache_test.cc.
Caveat: the fixture's weights are random (std 0.15), so its figures say that the q8_0 and bf16
latent rows are read right, not what a trained DeepSeek model loses; see MLA_BOUNDS' comment.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import mla_models

REPO = Path(__file__).resolve().parents[2]
TEXT = REPO / "tests" / "data" / "text" / "declaration_and_gettysburg.txt"
TOKENS = 2048
# dtype: (mean KLD at most, top-1 agreement at least). Measured on the amx path (docs/serving.md's
# table): bf16 KLD 1.25e-4, 99.51 %; q8_0 KLD 1.12e-3, 98.49 %; the bounds leave about 3x the KLD and
# twice the disagreement.
BOUNDS = {"bf16": (4e-4, 0.985), "q8_0": (3e-3, 0.97)}


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from fuselm_capture import prepare_default
    from fuselm_capture.gguf_prep import GgufPrepError

    model_dir = prepare_default.DEFAULT_OUT
    if not (model_dir / "config.json").exists():
        try:
            prepare_default.prepare_default_model(model_dir)
        except GgufPrepError as e:
            pytest.skip(f"{model_dir} is missing and cannot be prepared: {e}")
    return model_dir


def prompt_ids(model_dir: Path) -> list[int]:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(TEXT.read_text()).ids
    assert len(ids) >= TOKENS, f"{TEXT.name} holds {len(ids)} tokens, fewer than {TOKENS}"
    return ids[:TOKENS]


def teacher_forced_logits(fuselm_bin: Path, model_dir: Path, ids: list[int], kv: str, out: Path) -> np.ndarray:
    """[len(ids), vocab] logits of every prompt position (a memory map of the --logits-out file)."""
    cmd = [str(fuselm_bin), "generate", str(model_dir), "--dtype", "f32", "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", "1", "--ignore-eos", "--json", "--kv-cache-dtype", kv, "--logits-out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"fuselm failed ({proc.returncode}): {proc.stderr[-3000:]}"
    raw = np.memmap(out, dtype=np.float32, mode="r")
    return raw.reshape(len(ids), -1)  # one row per prompt position (--max-tokens 1 adds none)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def kld_and_agreement(ref: np.ndarray, got: np.ndarray, rows: int = 256) -> tuple[float, float]:
    """Mean KL(softmax(ref) || softmax(got)) over the rows, and the share of rows whose argmax agrees."""
    kld, same = [], []
    for r0 in range(0, ref.shape[0], rows):
        lp, lq = log_softmax(ref[r0:r0 + rows]), log_softmax(got[r0:r0 + rows])
        kld.append((np.exp(lp) * (lp - lq)).sum(-1))
        same.append(lp.argmax(-1) == lq.argmax(-1))
    return float(np.concatenate(kld).mean()), float(np.concatenate(same).mean())


def test_kld_and_agreement_of_bf16_and_q8_0_caches_against_f32(fuselm_bin, smollm2_dir, tmp_path):
    ids = prompt_ids(smollm2_dir)
    logits = {kv: teacher_forced_logits(fuselm_bin, smollm2_dir, ids, kv, tmp_path / f"{kv}.f32")
              for kv in ("f32", "bf16", "q8_0")}
    # A cache that changed nothing would measure 0: each dtype must differ from f32 at all.
    measured = {kv: kld_and_agreement(logits["f32"], logits[kv]) for kv in BOUNDS}
    for kv, (kld, top1) in measured.items():
        print(f"\n{kv} KV cache vs f32 over {TOKENS} tokens: mean KLD {kld:.3g}, top-1 agreement {top1:.2%}")
    for kv, (max_kld, min_top1) in BOUNDS.items():
        kld, top1 = measured[kv]
        assert 0 < kld <= max_kld, f"{kv}: mean KLD {kld:.3g} outside (0, {max_kld}]"
        assert top1 >= min_top1, f"{kv}: top-1 agreement {top1:.2%} < {min_top1:.1%}"


MLA_TOKENS = 500
# Measured on the avx2 path (AMD Zen 3) over MLA_TOKENS positions, random weights (the caveat
# above): bf16 KLD 8.0e-6, 99.60 %; q8_0 KLD 6.0e-5, 99.00 % (an earlier implementation measured
# 8.9e-6 / 99.60 % and 7.0e-5 / 98.80 %). The bounds leave several times the KLD; on random
# weights near-ties are common, so the agreement bounds leave room for them.
MLA_BOUNDS = {"bf16": (5e-5, 0.985), "q8_0": (4e-4, 0.95)}


def test_kld_and_agreement_of_a_latent_attention_model(fuselm_bin, model_cache, tmp_path):
    model_dir = model_cache / "mla_v2_style"  # test_mla.py's directory: one build and capture for both
    if not (model_dir / "config.json").exists():
        mla_models.build("v2_style", model_dir)
    vocab = mla_models.make_config("v2_style").vocab_size
    ids = np.random.default_rng(31).integers(0, vocab, MLA_TOKENS).tolist()
    logits = {kv: teacher_forced_logits(fuselm_bin, model_dir, ids, kv, tmp_path / f"mla-{kv}.f32")
              for kv in ("f32", "bf16", "q8_0")}
    measured = {kv: kld_and_agreement(logits["f32"], logits[kv]) for kv in MLA_BOUNDS}
    for kv, (kld, top1) in measured.items():
        print(f"\nMLA {kv} KV cache vs f32 over {MLA_TOKENS} tokens (random weights): mean KLD {kld:.3g}, "
              f"top-1 agreement {top1:.2%}")
    for kv, (max_kld, min_top1) in MLA_BOUNDS.items():
        kld, top1 = measured[kv]
        assert 0 < kld <= max_kld, f"MLA {kv}: mean KLD {kld:.3g} outside (0, {max_kld}]"
        assert top1 >= min_top1, f"MLA {kv}: top-1 agreement {top1:.2%} < {min_top1:.1%}"
    # q8_0 rounds coarser than bf16: a q8_0 figure no worse than bf16's would mean it was not stored as q8_0.
    assert measured["q8_0"][0] > measured["bf16"][0]
