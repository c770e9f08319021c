"""GGUF tensors transformers' loader does not read: llama.cpp's RoPE frequency factors are applied,
any other is refused (python/fuselm_capture/gguf_rope_factors.py, gguf_capture._check_every_tensor_read).

A Llama 3.1+ checkpoint's "llama3" RoPE reaches a GGUF only as the tensor `rope_freqs.weight` (one
factor per frequency, llama.cpp's converter): the file's metadata says plain RoPE, and transformers
loading the file runs it so. The oracle here is the model the file was made from, transformers
with its llama3 RoPE config; the factors are transformers' own plain over llama3 frequencies (what
llama.cpp's converter computes). The test first checks that transformers loading the GGUF (factors
ignored) is far from that oracle, so the engine cannot pass by ignoring them too.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import torch

import test_gguf_families as families

LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=10000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)


def _llama3_config():
    config = families._config("llama")
    config.rope_parameters = dict(LLAMA3_ROPE)
    return config


def _factors(config) -> np.ndarray:
    """transformers' plain inverse frequencies over its llama3 ones (convert_hf_to_gguf's rope_factors)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    head = families.H // families.HEADS
    plain = 1.0 / LLAMA3_ROPE["rope_theta"] ** (torch.arange(0, head, 2, dtype=torch.float64) / head)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    return (plain.double() / scaled.double()).numpy()


def _run(fuselm_bin, path, tmp_path, tmp_path_factory):
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path_factory.mktemp("cache")))
    return families._fuselm(fuselm_bin, path, tmp_path, env)


def test_rope_factors_of_a_gguf_are_applied(fuselm_bin, tmp_path, tmp_path_factory):
    from transformers import AutoModelForCausalLM
    config = _llama3_config()
    factors = _factors(config)
    assert factors.max() > 2.0  # the scaling acts on the low frequencies
    path = tmp_path / "llama3-rope.gguf"
    oracle = families.write_gguf("llama", "F32", path, config=config, extra={"rope_freqs.weight": factors})
    ids = torch.tensor([families.PROMPT])
    with torch.no_grad():
        ignored = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
        plain_logits = ignored.eval()(ids).logits[0].numpy()
        ref_prompt = oracle(ids).logits[0].numpy()
    scale = np.abs(ref_prompt).max()
    assert np.abs(plain_logits - ref_prompt).max() > 0.05 * scale, "the factors do not move the logits"

    tokens, ours = _run(fuselm_bin, path, tmp_path, tmp_path_factory)
    with torch.no_grad():
        ref = oracle(torch.tensor([families.PROMPT + tokens[:-1]])).logits[0].numpy()
        greedy = oracle.generate(ids, max_new_tokens=len(tokens), do_sample=False)[0, len(families.PROMPT):]
    assert np.abs(ours - ref).max() <= 1e-3 * np.abs(ref).max()
    assert tokens == greedy.tolist()


def test_a_gguf_tensor_no_parameter_reads_is_refused(fuselm_bin, tmp_path, tmp_path_factory):
    """Token-type embeddings (llama.cpp's `token_types`, BERT's) have no place in the model transformers
    builds from a llama file's metadata: one line naming the tensor, exit 1."""
    path = tmp_path / "extra.gguf"
    families.write_gguf("llama", "Q8_0", path, extra={"token_types.weight": np.ones((2, families.H))})
    last = families.refusal(fuselm_bin, path, tmp_path_factory)
    assert "'token_types.weight'" in last and "belong to no parameter" in last, last


def test_factors_the_graph_has_no_frequencies_for_are_refused(fuselm_bin, tmp_path, tmp_path_factory):
    """Factors of another length than the file's RoPE: refused naming the tensor, never ignored."""
    path = tmp_path / "wrong-factors.gguf"
    families.write_gguf("llama", "Q8_0", path, extra={"rope_freqs.weight": np.full(7, 2.0)})
    last = families.refusal(fuselm_bin, path, tmp_path_factory)
    assert "'rope_freqs.weight' holds 7 factors" in last, last


def test_verify_applies_the_factors_to_its_reference(fuselm_bin, tmp_path, tmp_path_factory):
    """`fuselm verify` on such a file: transformers' reference gets the factors too (else it would be
    the model without them, more than 5 % of max|logit| away, and verify would fail)."""
    path = tmp_path / "llama3-rope.gguf"
    config = _llama3_config()
    families.write_gguf("llama", "F32", path, config=config, extra={"rope_freqs.weight": _factors(config)})
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path_factory.mktemp("cache")))
    proc = subprocess.run([str(fuselm_bin), "verify", str(path)], capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0 and "verify: PASS" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_factors_that_are_not_finite_positive_are_refused(fuselm_bin, tmp_path, tmp_path_factory):
    """A zero factor would make a frequency infinite: refused, never run."""
    factors = np.ones(families.H // families.HEADS // 2)
    factors[3] = 0.0
    path = tmp_path / "zero-factor.gguf"
    families.write_gguf("llama", "Q8_0", path, extra={"rope_freqs.weight": factors})
    last = families.refusal(fuselm_bin, path, tmp_path_factory)
    assert "'rope_freqs.weight' holds factors that are not finite positive numbers" in last, last
