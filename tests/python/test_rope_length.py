"""RoPE that depends on the sequence length (longrope, dynamic NTK): captured at the model's context.

transformers picks these frequencies by `torch.max(position_ids) + 1`; capture reads that as the
context (python/fuselm_capture/sequence_length.py), as vLLM and llama.cpp fix the choice once. The
oracle is transformers itself: over a prompt longer than the original context it takes the long
factors on its own; over a short prompt it is run with the same reading of its length (the pin),
and the test first checks that this reading changes its logits, so the short case cannot pass by
the engine ignoring the choice.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import parity

ORIGINAL = 64
CONTEXT = 256
HEAD_HALF = 8  # head_dim 16 / 2: one factor per rotated pair


def _longrope(rotated_half: int = HEAD_HALF, **extra) -> dict:
    return dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=ORIGINAL,
                long_factor=[1.0 + 0.6 * i for i in range(rotated_half)],
                short_factor=[1.0 + 0.05 * i for i in range(rotated_half)], **extra)


COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=CONTEXT, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# name -> (config class, overrides, whether a short prompt reads a different length than transformers')
CASES = {
    "llama_longrope": ("LlamaConfig", dict(rope_parameters=_longrope()), True),
    # Phi-4-mini's shape: three quarters of each head rotated.
    "phi3_longrope_partial": ("Phi3Config", dict(partial_rotary_factor=0.75, original_max_position_embeddings=ORIGINAL,
                                                 rope_parameters=_longrope(6)), True),
    # Phi-MoE picks only its cos/sin scale by the length (its own rotary embedding, no decorator).
    "phimoe_longrope": ("PhimoeConfig", dict(num_local_experts=4, num_experts_per_tok=2,
                                             rope_parameters=_longrope(short_mscale=1.0, long_mscale=1.3)), True),
    # Dynamic NTK grows its base only past max_position_embeddings: never, within the context.
    "llama_dynamic": ("LlamaConfig", dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0,
                                                               factor=2.0)), False),
}


def _build(name: str, out) -> None:
    import transformers
    from transformers import AutoModelForCausalLM

    import tiny_models
    cls, overrides, _ = CASES[name]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(getattr(transformers, cls)(**dict(COMMON, **overrides)),
                                             dtype=torch.float32)
    tiny_models.randomize(model, 0.15)
    model.save_pretrained(out)


class _ReadAtContext(torch.nn.Module):
    """transformers' model, its length read as the context (the capture's pin), called as parity calls it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        from fuselm_capture.sequence_length import pinned_sequence_length
        positions = torch.arange(ids.shape[1])[None]
        with pinned_sequence_length(self.model):
            return self.model(input_ids=ids, position_ids=positions)


@pytest.mark.parametrize("name", sorted(CASES))
def test_length_dependent_rope(name, fuselm_bin, model_cache, tmp_path):
    model_dir = model_cache / f"rope-{name}"
    if not (model_dir / "config.json").exists():
        _build(name, model_dir)
    model = parity.hf_model(model_dir)
    rng = np.random.default_rng(0)
    long_prompt = [int(x) for x in rng.integers(3, 500, size=ORIGINAL + 40)]
    parity.check_parity(f"{name}/long", fuselm_bin, model_dir, long_prompt, tmp_path, max_tokens=8, model=model)

    short_prompt = [int(x) for x in rng.integers(3, 500, size=7)]
    oracle = _ReadAtContext(model).eval()
    with torch.no_grad():
        ours = oracle(torch.tensor([short_prompt])).logits
        theirs = model(torch.tensor([short_prompt])).logits
    moved = float((ours - theirs).abs().max() / theirs.abs().max())
    if CASES[name][2]:
        assert moved > 10 * parity.REL_TOL, f"{name}: the length read as the context moves logits by only {moved:.2g}"
    else:
        assert moved == 0.0, f"{name}: dynamic NTK acted within the context ({moved:.2g})"
    parity.check_parity(f"{name}/short", fuselm_bin, model_dir, short_prompt, tmp_path, max_tokens=8, model=oracle)


def test_a_smaller_served_context_is_captured_for(fuselm_bin, model_cache, tmp_path):
    """`--max-context` at or below the original context (vLLM's max_model_len, llama.cpp's -c): the
    model is captured again for it, and runs its short factors, as transformers does over a prompt
    within that context. The pin at the model's context moves these logits (test above), so running
    the model's own IR here fails the check."""
    name = "phi3_longrope_partial"
    model_dir = model_cache / f"rope-{name}"
    if not (model_dir / "config.json").exists():
        _build(name, model_dir)
    model = parity.hf_model(model_dir)
    prompt = [int(x) for x in np.random.default_rng(5).integers(3, 500, size=20)]
    with torch.no_grad():
        pinned = _ReadAtContext(model).eval()(torch.tensor([prompt])).logits
        plain = model(torch.tensor([prompt])).logits
    assert float((pinned - plain).abs().max() / plain.abs().max()) > 10 * parity.REL_TOL
    parity.check_parity(f"{name}/served-{ORIGINAL}", fuselm_bin, model_dir, prompt, tmp_path, max_tokens=8,
                        model=model, extra=["--max-context", str(ORIGINAL)])
    length = json.loads((model_dir / f"fuselm-ir-ctx{ORIGINAL}" / "sequence_length.json").read_text())
    assert length["context"] == ORIGINAL and length["readers"], length
    assert json.loads((model_dir / "fuselm-ir" / "sequence_length.json").read_text())["context"] == CONTEXT
