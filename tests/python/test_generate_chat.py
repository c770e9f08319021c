"""`fuselm generate --chat` on the default model: the prompt is the model's chat template applied
to one user message (add_generation_prompt=True) and tokenized without adding special tokens
again, as transformers' apply_chat_template(tokenize=True) does; the greedy answer equals
transformers' greedy answer for the same question."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from parity import hf_model

REPO = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"
MAX_NEW = 24


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


def test_generate_chat_matches_transformers_apply_chat_template(fuselm_bin, smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    prompt_ids = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]
    model = hf_model(smollm2_dir)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=MAX_NEW, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    hf_new = out[0, len(prompt_ids):].tolist()
    hf_answer = tok.decode(hf_new, skip_special_tokens=True)

    proc = subprocess.run([str(fuselm_bin), "generate", str(smollm2_dir), "--chat", "--prompt", QUESTION,
                           "--max-tokens", str(MAX_NEW), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["prompt_ids"] == prompt_ids
    ours = result["token_ids"]
    assert ours == hf_new, f"fuselm {tok.decode(ours)!r} vs transformers {hf_answer!r}"
    assert result["text"] == hf_answer
    assert "Paris" in hf_answer  # the oracle answers the question; the comparison is not vacuous


def test_generate_chat_refuses_prompt_ids(fuselm_bin):
    proc = subprocess.run([str(fuselm_bin), "generate", "--chat", "--prompt-ids", "1,2"], capture_output=True, text=True)
    assert proc.returncode != 0 and "--chat" in proc.stderr
