"""Multimodal wrappers run as text models, against transformers' wrapper class as the oracle.

A tiny random `...ForConditionalGeneration` of each family (wrapper_models.py) is run with
`fuselm generate DIR --prompt-ids ...` exactly as a text model is: for prompts of 1, 7 and 300
tokens its greedy 32 tokens equal the wrapper's own greedy decoding on token ids alone, and every
logits row is within the parity tests' tolerance (parity.py). Also: the vision tower and projector
are noted once as not read, never refused as missing layers; both checkpoint layouts (as
transformers saves a wrapper, and as its module tree names the parameters) give the same run; the
eos id of the text config ends generation; and the server takes a chat message's content as a list of text parts and
refuses an image part with a 400 naming it.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import os

import fuselm_runner
import wrapper_models
from parity import TIES, check_parity, hf_greedy, hf_logits

PROMPT_LENGTHS = [1, 7, 300]
PASSING = ["gemma3", "mistral3", "llava", "llava_next", "llava_onevision", "aya_vision", "cohere2_vision", "internvl",
           "idefics3", "smolvlm", "paligemma", "lfm2_vl", "got_ocr2", "mllama", "qwen2_vl", "qwen2_5_vl", "qwen3_vl",
           "glm4v", "qwen2_audio", "voxtral"]

# The default run takes a handful of families, each with a different wrapper layout (a language
# model under model.language_model, a projector, a mask built by the wrapper, a rope of its own,
# an audio tower); scripts/test.sh --long (FUSELM_LONG=1) runs every family.
IN_CI = ["gemma3", "llava", "paligemma", "qwen2_5_vl", "voxtral"]
LONG = os.environ.get("FUSELM_LONG") == "1"


def prompt_of(length: int, vocab: int, seed: int) -> list[int]:
    g = np.random.default_rng(seed)
    return [int(x) for x in g.integers(0, vocab, size=length)]


def wrapper_dir(model_cache: Path, family: str) -> Path:
    d = model_cache / f"wrapper_{family}"
    if not (d / "config.json").exists():
        wrapper_models.build(family, d)
    return d


def run(fuselm_bin: Path, model_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(fuselm_bin), "generate", str(model_dir), *args], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("family", IN_CI)
def test_wrapper_parity(family, fuselm_bin, model_cache, tmp_path):
    check_wrapper(family, fuselm_bin, model_cache, tmp_path)


@pytest.mark.skipif(not LONG, reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
@pytest.mark.parametrize("family", [f for f in PASSING if f not in IN_CI])
def test_long_wrapper_parity(family, fuselm_bin, model_cache, tmp_path):
    check_wrapper(family, fuselm_bin, model_cache, tmp_path)


def check_wrapper(family, fuselm_bin, model_cache, tmp_path):
    model_dir = wrapper_dir(model_cache, family)
    model = wrapper_models.hf_wrapper(model_dir)
    vocab = model.config.get_text_config().vocab_size
    worst = 0.0
    for length in PROMPT_LENGTHS:
        worst = max(worst, check_parity(f"wrapper_{family}/{length}", fuselm_bin, model_dir,
                                        prompt_of(length, vocab, seed=length), tmp_path, model=model))
    print(f"\nwrapper {family}: max relative logit difference {worst:.2e}; ties accepted: "
          f"{sum(v for k, v in TIES.items() if k.startswith(f'wrapper_{family}/'))}")


def _checkpoint_keys(model_dir: Path) -> set[str]:
    from safetensors import safe_open
    keys = set()
    for f in model_dir.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            keys.update(st.keys())
    return keys


@pytest.mark.parametrize("family", ["qwen2_vl", "gemma3", "voxtral"])
def test_towers_are_noted_not_refused(family, fuselm_bin, model_cache):
    """Every checkpoint tensor the graph does not read (a vision or an audio tower, a projector) lies
    under a prefix the one note names, the counts add up, and no read tensor lies under a noted
    prefix; nothing is warned about."""
    model_dir = wrapper_dir(model_cache, family)
    proc = run(fuselm_bin, model_dir, "--prompt-ids", "1,2,3", "--max-tokens", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if line.startswith("fuselm: note:")]
    assert len(notes) == 1, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    noted = {p: int(n) for p, n in re.findall(r"(\S+)\* \((\d+) tensors", notes[0])}
    ir = json.loads((model_dir / "fuselm-ir" / "ir.json").read_text())
    read = {k for p in ir["parameters"].values() for k in p["checkpoint"]["keys"]}
    unread = _checkpoint_keys(model_dir) - read
    assert unread and sum(noted.values()) == len(unread), (noted, len(unread))
    for prefix, n in noted.items():
        assert n == sum(k.startswith(prefix) for k in unread), prefix
        assert not any(k.startswith(prefix) for k in read), prefix
    # The language model is what the graph reads: its embedding and LM head widths are the vocab.
    assert any(p["shape"][0] == 512 for p in ir["parameters"].values())


def test_module_tree_layout_runs_the_same(fuselm_bin, model_cache, tmp_path):
    """A checkpoint keyed by the wrapper's own parameter names (not transformers' saved layout) is
    mapped as well: same tokens, same logits."""
    src = wrapper_dir(model_cache, "llava")
    model = wrapper_models.hf_wrapper(src)
    dst = tmp_path / "llava_tree"
    dst.mkdir()
    for f in ("config.json", "generation_config.json"):
        shutil.copy(src / f, dst / f)
    from safetensors.torch import save_file
    state = {k: v.contiguous() for k, v in model.named_parameters()}
    assert not (set(state) & _checkpoint_keys(src)) - {"lm_head.weight"}, "the layouts should differ"
    save_file(state, str(dst / "model.safetensors"))
    prompt = prompt_of(7, 512, seed=7)
    a, la = fuselm_runner.generate(fuselm_bin, src, prompt, 8, tmp_path)
    b, lb = fuselm_runner.generate(fuselm_bin, dst, prompt, 8, tmp_path)
    assert a["token_ids"] == b["token_ids"] == hf_greedy(model, prompt, 8)
    np.testing.assert_array_equal(la, lb)


def test_eos_from_the_text_config(fuselm_bin, model_cache, tmp_path):
    """A wrapper whose generation_config.json is gone and whose config.json names its eos id only in
    the text config stops there."""
    src = wrapper_dir(model_cache, "mistral3")
    model = wrapper_models.hf_wrapper(src)
    prompt = prompt_of(7, 512, seed=11)
    greedy = hf_greedy(model, prompt, 6)
    dst = tmp_path / "mistral3_eos"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("fuselm-ir", "generation_config.json"))
    cfg = json.loads((dst / "config.json").read_text())
    for k in ("eos_token_id", "bos_token_id"):
        cfg.pop(k, None)
    cfg["text_config"]["eos_token_id"] = greedy[3]
    (dst / "config.json").write_text(json.dumps(cfg))
    stop = greedy.index(greedy[3])  # the first time the eos id comes
    proc = run(fuselm_bin, dst, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "6", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["finish_reason"] == "stop", result
    assert result["token_ids"] == greedy[:stop + 1], (result["token_ids"], greedy)


# -- the server: content as a list of parts ------------------------------------------------------

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ("The capital of France is Paris. Name three colors: red, green and blue. A spider has eight legs. "
          "Water is made of hydrogen and oxygen. Say hello in Spanish: hola. ") * 20


def _add_chat_tokenizer(model_dir: Path) -> None:
    """A byte-level BPE of under 512 tokens and a ChatML template, so the tiny wrapper can chat."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE, "eos_token": "<|im_end|>",
        "bos_token": None, "pad_token": "<|endoftext|>"}))
    gen = json.loads((model_dir / "generation_config.json").read_text())
    gen["eos_token_id"] = tok.token_to_id("<|im_end|>")
    (model_dir / "generation_config.json").write_text(json.dumps(gen))


@pytest.fixture(scope="module")
def chat_wrapper(model_cache):
    d = model_cache / "wrapper_chat_qwen2_vl"
    if not (d / "tokenizer.json").exists():
        wrapper_models.build("qwen2_vl", d)
        _add_chat_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def server(fuselm_bin, chat_wrapper, tmp_path_factory):
    from fuselm_server import Server
    s = Server(fuselm_bin, chat_wrapper, ["--kv-cache-memory", "64MiB"], tmp_path_factory.mktemp("serve") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def _chat(server, content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0, **kw}
    return server.post_json("/v1/chat/completions", body)


@pytest.mark.parametrize("part, says", [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "image input is not supported yet"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "audio input is not supported yet"),
    ({"type": "file", "file": {"file_id": "f"}}, "only 'text' parts are supported"),
])
def test_non_text_part_is_a_400_naming_it(server, chat_wrapper, part, says):
    status, body = _chat(server, [{"type": "text", "text": "What is in this picture?"}, part])
    assert status == 400, body
    message = body["error"]["message"]
    assert f"messages[0].content[1] has type '{part['type']}'" in message and says in message, message
    assert body["error"]["param"] == "messages"
    assert str(chat_wrapper) not in message and "/" not in message.replace("image/png", ""), message


def test_text_parts_are_the_joined_string(server, chat_wrapper):
    """A list of text parts answers as the string of the parts joined by newlines, and that answer
    is the wrapper's greedy decoding of transformers' rendering of the joined message."""
    parts = ["Name three colors.", "Say hello in Spanish."]
    s1, listed = _chat(server, [{"type": "text", "text": p} for p in parts], logprobs=True)
    s2, joined = _chat(server, "\n".join(parts), logprobs=True)
    assert s1 == s2 == 200, (listed, joined)
    assert listed["choices"][0]["message"] == joined["choices"][0]["message"]
    for k in ("prompt_tokens", "completion_tokens"):
        assert listed["usage"][k] == joined["usage"][k], (listed["usage"], joined["usage"])

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(chat_wrapper)
    prompt = tok.apply_chat_template([{"role": "user", "content": "\n".join(parts)}], add_generation_prompt=True,
                                     tokenize=True)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    assert listed["usage"]["prompt_tokens"] == len(prompt)
    model = wrapper_models.hf_wrapper(chat_wrapper)
    want = hf_greedy(model, list(prompt), 8)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    if eos in want:
        want = want[:want.index(eos)]
    assert listed["choices"][0]["message"]["content"] == tok.decode(want, skip_special_tokens=True)


def test_oracle_reads_text_only(model_cache):
    """The oracle's logits on token ids alone do not depend on the vision tower's weights (what
    lets fuselm leave the tower unloaded)."""
    model = wrapper_models.hf_wrapper(wrapper_dir(model_cache, "llava"))
    ids = prompt_of(7, 512, seed=5)
    before = hf_logits(model, ids)
    with torch.no_grad():
        for p in model.model.vision_tower.parameters():
            p.add_(1.0)
    np.testing.assert_array_equal(before, hf_logits(model, ids))

