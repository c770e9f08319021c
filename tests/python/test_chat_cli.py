"""`fuselm chat` (template, streaming reply, /clear, multi-line input) against transformers'
chat template and greedy decoding; `fuselm generate --stop`, `--prompt-file` and unseeded runs."""
from __future__ import annotations

import json
import subprocess

import pytest

from parity import hf_greedy, hf_model
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def tok(smollm2_dir):  # noqa: F811
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smollm2_dir)


def run(fuselm_bin, *args, stdin=""):
    p = subprocess.run([str(fuselm_bin), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def hf_reply(model, tok, messages, n):
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    out = hf_greedy(model, list(ids), n)
    if tok.eos_token_id in out:
        out = out[:out.index(tok.eos_token_id)]
    return tok.decode(out, skip_special_tokens=True)


def test_chat_replies_as_transformers_and_clear_forgets(fuselm_bin, smollm2_dir, tok):  # noqa: F811
    q = "What is 2 + 2?"
    out = run(fuselm_bin, "chat", smollm2_dir, "--temperature", "0", "--max-tokens", "10", "--system", "Be brief.",
              stdin=f"{q}\n/clear\n\"\"\"\n{q}\nThanks.\n\"\"\"\n/exit\n")
    model = hf_model(smollm2_dir)
    sys_msg = {"role": "system", "content": "Be brief."}
    first = hf_reply(model, tok, [sys_msg, {"role": "user", "content": q}], 10)
    second = hf_reply(model, tok, [sys_msg, {"role": "user", "content": q + "\nThanks."}], 10)
    assert out == f"{first}\n{second}\n"


def test_generate_stop_and_prompt_file(fuselm_bin, smollm2_dir, tmp_path):  # noqa: F811
    prompt = "1, 2, 3, 4, 5,"
    base = ["generate", smollm2_dir, "--max-tokens", "20", "--json"]
    full = json.loads(run(fuselm_bin, *base, "--prompt", prompt).splitlines()[-1])
    text = full["text"]
    stop = text[3:7]
    cut = json.loads(run(fuselm_bin, *base, "--prompt", prompt, "--stop", stop).splitlines()[-1])
    assert cut["text"] == text[:text.find(stop)]
    assert cut["finish_reason"] == "stop"
    assert len(cut["token_ids"]) < len(full["token_ids"])
    f = tmp_path / "prompt.txt"
    f.write_text(prompt)
    assert json.loads(run(fuselm_bin, *base, "--prompt-file", f).splitlines()[-1])["token_ids"] == full["token_ids"]


def test_unseeded_generate_is_random_and_seeded_repeats(fuselm_bin, smollm2_dir):  # noqa: F811
    base = ["generate", smollm2_dir, "--prompt", "My favourite animal is", "--max-tokens", "12", "--temperature", "1",
            "--json", "--ignore-eos"]
    ids = lambda *extra: json.loads(run(fuselm_bin, *base, *extra).splitlines()[-1])["token_ids"]
    assert ids() != ids()
    assert ids("--seed", "5") == ids("--seed", "5")
