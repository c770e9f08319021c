"""Parity helpers shared by the parity tests: transformers (the oracle) against `fuselm generate`.

check_parity runs fuselm's greedy generation and compares it with transformers in fp32 (eager
attention): the generated tokens must equal transformers' greedy decoding, and every logits row
(prompt positions and decode steps) must be within REL_TOL x max|logit| of transformers' full
forward over the same tokens. Where transformers' own top two logits are within that tolerance (a
true tie) either token is accepted; such ties are counted in TIES and printed.
"""
from __future__ import annotations

import numpy as np
import torch

import fuselm_runner

NEW_TOKENS = 32
REL_TOL = 1e-3
TIES: dict[str, int] = {}


def hf_model(model_dir, dtype=torch.float32):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding with a full forward per step (no KV cache: the plainest oracle)."""
    ids = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(ids).logits[0, -1]
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def hf_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def check_parity(name: str, fuselm_bin, model_dir, prompt: list[int], tmp_path, max_tokens=NEW_TOKENS,
                 model=None, extra: list[str] | None = None) -> float:
    """Asserts greedy-token and logits parity; returns the max |logit diff| / max|logit|.

    model: a transformers model already loaded from model_dir in fp32 (loaded here when None).
    extra: more `fuselm generate` arguments.
    """
    if model is None:
        model = hf_model(model_dir)
    result, ours = fuselm_runner.generate(fuselm_bin, model_dir, prompt, max_tokens, tmp_path, extra=extra)
    assert len(result["token_ids"]) == max_tokens
    return check_against_oracle(name, model, prompt, result["token_ids"], ours)


def check_against_oracle(name: str, model, prompt: list[int], tokens: list[int], ours: np.ndarray) -> float:
    """check_parity's assertions on a run already made: `tokens` generated greedily after `prompt`,
    `ours` its logits rows [len(prompt) + len(tokens) - 1, vocab]; model is transformers' in fp32."""
    max_tokens = len(tokens)
    assert max_tokens > 0
    # The oracle's logits over the prompt followed by our tokens cover every row we produced.
    ref = hf_logits(model, prompt + tokens[:-1])
    scale = float(np.abs(ref).max())
    tol = REL_TOL * scale
    expected = hf_greedy(model, prompt, max_tokens)
    # Up to the first divergence every row must match; a divergence must be a true tie.
    n_rows = len(prompt) + max_tokens - 1
    diverged_at = next((i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b), None)
    rows = n_rows if diverged_at is None else len(prompt) + diverged_at
    diff = float(np.abs(ours[:rows] - ref[:rows]).max())
    assert diff <= tol, f"{name}: max |logit diff| {diff:.3g} > {tol:.3g} (1e-3 x max|logit| {scale:.3g})"
    if diverged_at is not None:
        row = ref[len(prompt) - 1 + diverged_at]
        top2 = np.sort(row)[-2:]
        assert top2[1] - top2[0] <= tol, (
            f"{name}: token {diverged_at} is {tokens[diverged_at]}, transformers gives {expected[diverged_at]} "
            f"(its top-2 gap {top2[1] - top2[0]:.3g} > tolerance {tol:.3g})")
        TIES[name] = TIES.get(name, 0) + 1
        print(f"\n{name}: true tie at generated token {diverged_at} (top-2 gap {top2[1] - top2[0]:.3g}), accepted")
    return diff / scale
