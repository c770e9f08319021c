"""Prompt ids at every entry point against transformers' tokenizer for the same file (issue 28).

`fuselm tokenize`, the prompt ids of `generate --prompt` (its --json `prompt_ids`), `serve`'s
/tokenize and completions (usage), and for chat `generate --chat`, `apply-template --tokenize`,
/tokenize with messages and chat completions, on the SmolLM2 HF directory, the SmolLM2 GGUF and
the Gemma 3 GGUF (skipped with the reason when a file is absent).

Oracles (transformers 5.18):
- an HF directory: `AutoTokenizer.from_pretrained(dir)(text)`: its tokenizer.json's post_processor
  (transformers drops tokenizer_config.json's add_bos_token / add_eos_token when tokenizer.json
  exists: test_hf_rule_is_the_post_processor);
- a GGUF: `AutoTokenizer.from_pretrained(dir, gguf_file=...)(text, add_special_tokens=False)` for
  the pieces, with the file's `tokenizer.ggml.add_bos_token` / `add_eos_token` (as llama.cpp reads
  them) for bos/eos around them: transformers builds a GGUF's tokenizer without them, so its
  add_special_tokens=True ids lack the BOS the Gemma file asks for;
- chat: `apply_chat_template(..., tokenize=True)`, which encodes the rendered text with
  add_special_tokens=False (the template writes its own BOS: no second one).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import long_mode
from fuselm_server import Server

REPO = Path(__file__).resolve().parents[2]
def _gemma3_path() -> Path:
    """$FUSELM_GEMMA3_GGUF, else the file in the real-checkpoint fetch script's cache
    ($FUSELM_REAL_CACHE, default ~/.cache/fuselm/real) or in ~/.cache/fuselm-real."""
    if os.environ.get("FUSELM_GEMMA3_GGUF"):
        return Path(os.environ["FUSELM_GEMMA3_GGUF"])
    name = "gemma-3-270m-q4_k_m.gguf"
    places = [Path(os.environ.get("FUSELM_REAL_CACHE", Path.home() / ".cache/fuselm/real")), Path.home() / ".cache/fuselm-real"]
    return next((p / name for p in places if (p / name).is_file()), places[0] / name)


GEMMA3 = _gemma3_path()
QUESTION = "What is the capital of France? Réponds en français 🙂"
# A template that writes its own BOS, as Gemma's and Llama's do: the ids must hold it once.
BOS_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
                "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


@dataclass
class Model:
    name: str
    source: Path      # what fuselm is given
    hf: object        # transformers' tokenizer for the same file
    bos: list[int]    # ids the file asks for around plain text (GGUF); None: transformers' own (HF dir)
    eos: list[int]
    gguf: bool

    def expected(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not self.gguf or not add_special_tokens:
            return self.hf(text, add_special_tokens=add_special_tokens)["input_ids"]
        return self.bos + self.hf(text, add_special_tokens=False)["input_ids"] + self.eos

    def texts(self) -> list[str]:
        """Plain, empty, whitespace, unicode, and special-token text (this model's and others')."""
        special = (f"{self.hf.bos_token}x{self.hf.eos_token} <start_of_turn>user\nhi<end_of_turn>"
                   f"<|im_start|>assistant<|im_end|>")
        return ["Hello world", "", "  The capital of France is\n", "héllo wörld — 日本語 🙂 ñ\t", special]

    def chat(self, messages, template=None) -> tuple[str, list[int]]:
        kw = {"chat_template": template} if template else {}
        text = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kw)
        ids = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          **kw)["input_ids"]
        return text, ids


def gguf_flags(path: Path) -> tuple[list[int], list[int]]:
    """The bos/eos ids the GGUF's tokenizer.ggml.add_bos_token / add_eos_token ask for (absent: no)."""
    from gguf import GGUFReader

    f = GGUFReader(str(path)).fields

    def get(key):
        return f[key].contents() if key in f else None

    bos = [get("tokenizer.ggml.bos_token_id")] if get("tokenizer.ggml.add_bos_token") else []
    eos = [get("tokenizer.ggml.eos_token_id")] if get("tokenizer.ggml.add_eos_token") else []
    return bos, eos


def smollm2_dir() -> Path:
    from fuselm_capture import prepare_default
    from fuselm_capture.gguf_prep import GgufPrepError

    d = prepare_default.DEFAULT_OUT
    if not (d / "config.json").exists():
        try:
            prepare_default.prepare_default_model(d)
        except GgufPrepError as e:
            pytest.skip(f"{d} is missing and cannot be prepared: {e}")
    return d


def smollm2_gguf() -> Path:
    from fuselm_capture import prepare_default
    from fuselm_capture.gguf_prep import GgufPrepError

    try:
        return prepare_default.find_default_gguf()
    except GgufPrepError as e:
        pytest.skip(str(e))


def gemma3_gguf() -> Path:
    if not GEMMA3.is_file():
        pytest.skip(f"{GEMMA3} is absent (fetch the real checkpoints, or set FUSELM_GEMMA3_GGUF)")
    return GEMMA3


_MODELS: dict[str, Model] = {}


# gemma3-gguf (the real Gemma 3 270M file: SentencePiece, its own BOS rule) runs in long mode.
@pytest.fixture(scope="module", params=long_mode.split(["smollm2-dir", "smollm2-gguf", "gemma3-gguf"],
                                                      default=["smollm2-dir", "smollm2-gguf"]))
def model(request) -> Model:
    from transformers import AutoTokenizer

    name = request.param
    if name not in _MODELS:
        if name == "smollm2-dir":
            d = smollm2_dir()
            _MODELS[name] = Model(name, d, AutoTokenizer.from_pretrained(str(d)), [], [], False)
        else:
            path = smollm2_gguf() if name == "smollm2-gguf" else gemma3_gguf()
            hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            _MODELS[name] = Model(name, path, hf, *gguf_flags(path), True)
    return _MODELS[name]


def fuselm(fuselm_bin, *args, timeout=900, env=None) -> str:
    proc = subprocess.run([str(fuselm_bin), *map(str, args)], capture_output=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return proc.stdout.decode()


def tokenize_jsonl(fuselm_bin, source, texts, tmp_path, *extra) -> list[list[int]]:
    inp = tmp_path / "texts.jsonl"
    inp.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    return [json.loads(line) for line in fuselm(fuselm_bin, "tokenize", source, "--jsonl", inp, *extra).split("\n")[:-1]]


def test_file_rules_are_what_this_test_expects(model):
    """The files say what the tests below rely on: Gemma asks for BOS, SmolLM2 for none; and
    transformers leaves the Gemma GGUF's BOS out (why the oracle adds it from the metadata)."""
    if model.name == "gemma3-gguf":
        assert model.bos == [model.hf.bos_token_id] and model.eos == []
        assert model.hf("Hello")["input_ids"] == model.hf("Hello", add_special_tokens=False)["input_ids"]
    else:
        assert model.expected("Hello")[0] != model.hf.bos_token_id


def test_tokenize(fuselm_bin, model, tmp_path):
    texts = model.texts()
    assert tokenize_jsonl(fuselm_bin, model.source, texts, tmp_path) == [model.expected(t) for t in texts]
    assert tokenize_jsonl(fuselm_bin, model.source, texts, tmp_path, "--no-special") == \
        [model.expected(t, add_special_tokens=False) for t in texts]
    out = fuselm(fuselm_bin, "tokenize", model.source, "--text", texts[3], "--json")
    assert json.loads(out) == {"ids": model.expected(texts[3])}


def test_tokenize_default_model(fuselm_bin):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    out = fuselm(fuselm_bin, "tokenize", "--text", "Hello <|im_start|>world")
    assert out == ",".join(map(str, hf("Hello <|im_start|>world")["input_ids"])) + "\n"


def test_tokenize_dir_holding_a_gguf(fuselm_bin, tmp_path):
    """A directory holding one .gguf (and no config.json) is that GGUF, as for generate."""
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    d = tmp_path / "holder"
    d.mkdir()
    (d / gguf.name).symlink_to(gguf)
    bos, eos = gguf_flags(gguf)
    hf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    want = bos + hf("Hello world", add_special_tokens=False)["input_ids"] + eos
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path / "cache"))  # this path's directory is not kept
    assert fuselm(fuselm_bin, "tokenize", d, "--text", "Hello world", env=env) == ",".join(map(str, want)) + "\n"


def test_generate_prompt_ids(fuselm_bin, model):
    text = model.texts()[-1] + " " + model.texts()[3]
    out = fuselm(fuselm_bin, "generate", model.source, "--prompt", text, "--max-tokens", "1", "--json")
    assert json.loads(out.strip().splitlines()[-1])["prompt_ids"] == model.expected(text)


def test_chat_prompt_ids(fuselm_bin, model, tmp_path):
    messages = [{"role": "user", "content": QUESTION}]
    f = tmp_path / "messages.json"
    f.write_text(json.dumps({"messages": messages, "add_generation_prompt": True}), encoding="utf-8")
    if model.hf.chat_template:
        text, ids = model.chat(messages)
        out = fuselm(fuselm_bin, "generate", model.source, "--chat", "--prompt", QUESTION, "--max-tokens", "1", "--json")
        assert json.loads(out.strip().splitlines()[-1])["prompt_ids"] == ids
        assert json.loads(fuselm(fuselm_bin, "apply-template", model.source, "--messages", f, "--tokenize")) == \
            {"prompt": text, "ids": ids}
    # A template that writes the BOS itself: once, as transformers (the Gemma GGUF has no template).
    t = tmp_path / "bos.jinja"
    t.write_text(BOS_TEMPLATE, encoding="utf-8")
    text, ids = model.chat(messages, BOS_TEMPLATE)
    assert text.startswith(model.hf.bos_token) and ids[0] == model.hf.bos_token_id
    got = json.loads(fuselm(fuselm_bin, "apply-template", model.source, "--template", t, "--messages", f, "--tokenize"))
    assert got == {"prompt": text, "ids": ids}
    assert got["ids"][1] != model.hf.bos_token_id  # no second BOS


def test_serve_prompt_ids(fuselm_bin, model, tmp_path):
    texts = model.texts()
    messages = [{"role": "user", "content": QUESTION}]
    s = Server(fuselm_bin, model.source, ["--max-num-seqs", "2", "--kv-cache-memory", "128MiB"], tmp_path / "serve.log")
    try:
        for text in texts:
            want = model.expected(text)
            status, r = s.post_json("/tokenize", {"prompt": text})
            assert status == 200 and r["tokens"] == want, (text, r)
            status, r = s.post_json("/tokenize", {"prompt": text, "add_special_tokens": False})
            assert status == 200 and r["tokens"] == model.expected(text, add_special_tokens=False), (text, r)
            if want:  # an empty prompt cannot be completed
                status, r = s.post_json("/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0})
                assert status == 200 and r["usage"]["prompt_tokens"] == len(want), (text, r)
        if model.hf.chat_template:
            _, ids = model.chat(messages)
            status, r = s.post_json("/tokenize", {"messages": messages})
            assert status == 200 and r["tokens"] == ids, r
            status, r = s.post_json("/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0})
            assert status == 200 and r["usage"]["prompt_tokens"] == len(ids), r
    finally:
        assert s.stop() == 0


def bos_post_processor(bos: str, bos_id: int) -> dict:
    """tokenizer.json's post_processor putting `bos` before each sequence."""
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


@pytest.mark.parametrize("which", long_mode.split(["smollm2", "gemma3"], default=["smollm2"]))  # gemma3: long mode
def test_gguf_rule_comes_from_the_gguf(fuselm_bin, which, tmp_path):
    """A GGUF directory whose tokenizer.json says the opposite of the file (an older prep's, or
    edited) still gets the GGUF's own rule: it is read from the file, not from what a prep wrote."""
    from fuselm_capture.gguf_dir import prepare_gguf_dir
    from transformers import AutoTokenizer

    gguf = smollm2_gguf() if which == "smollm2" else gemma3_gguf()
    d = prepare_gguf_dir(gguf, tmp_path / which)
    bos, eos = gguf_flags(gguf)
    assert (bos != []) == (which == "gemma3") and eos == []
    hf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    spec = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    spec["post_processor"] = None if bos else bos_post_processor(hf.bos_token, hf.bos_token_id)
    (d / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    text = "Hello world"
    want = bos + hf(text, add_special_tokens=False)["input_ids"]
    assert fuselm(fuselm_bin, "tokenize", d, "--text", text) == ",".join(map(str, want)) + "\n"


def test_hf_rule_is_the_post_processor(fuselm_bin, tmp_path):
    """An HF directory: tokenizer.json's post_processor decides, tokenizer_config.json's
    add_bos_token does not (transformers 5.18 drops it when tokenizer.json exists)."""
    from transformers import AutoTokenizer

    src = smollm2_dir()
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(src / "tokenizer.json", d)
    cfg = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    (d / "tokenizer_config.json").write_text(json.dumps(dict(cfg, add_bos_token=True)), encoding="utf-8")
    text = "Hello world"
    for post in (None, "bos"):
        if post:
            spec = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
            spec["post_processor"] = bos_post_processor(cfg["bos_token"], 1)
            (d / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
        want = AutoTokenizer.from_pretrained(str(d))(text)["input_ids"]
        assert (want[0] == 1) == (post == "bos")  # the oracle follows the post_processor alone
        assert fuselm(fuselm_bin, "tokenize", d, "--text", text) == ",".join(map(str, want)) + "\n"
