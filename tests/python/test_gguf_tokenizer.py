"""The tokenizer fuselm builds from a GGUF's metadata (python/fuselm_capture/gguf_prep.py) for
vocabularies that are not byte-level BPE, on llama.cpp's own vocabulary files
(models/ggml-vocab-*.gguf from the llama-cpp-python 0.3.36 sdist, fetched as test_tokenizer_spm
does): SentencePiece BPE (`tokenizer.ggml.model = 'llama'`: llama-spm, phi-3, with scores, token
types and byte fallback, no merges in the file), and byte-level BPE vocabularies whose
`tokenizer.ggml.pre` names a split regex (qwen2, llama-bpe, qwen35).

Oracles: transformers' tokenizer from the same file (`AutoTokenizer.from_pretrained(dir,
gguf_file=...)`) for the pieces (ids without special tokens), and the file's
`tokenizer.ggml.add_bos_token` / `add_eos_token` (as llama.cpp reads them) for the special tokens
around them, which transformers v5 leaves out; then fuselm's C++ tokenizer against `tokenizers` on
the written tokenizer.json (ids, decode, streamed decode: test_tokenizer.check_tokenizer), on the
multilingual corpus and llama.cpp's test strings. A kind neither can build is one line.
"""
import sys
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

import long_mode  # noqa: E402
from test_tokenizer import check_tokenizer, corpus  # noqa: E402
from test_tokenizer_spm import inp_strings, vocab_dir  # noqa: E402,F401  (vocab_dir: the fixture)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from fuselm_capture.gguf_prep import GgufPrepError, read_gguf_metadata, tokenizer_from_gguf_metadata  # noqa: E402


@pytest.mark.parametrize("name", ["llama-spm", "phi-3"])
def test_sentencepiece_gguf_tokenizer(name, vocab_dir, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    meta = read_gguf_metadata(vocab_dir / f"ggml-vocab-{name}.gguf")
    assert meta["tokenizer.ggml.model"] == "llama"
    ours = tokenizer_from_gguf_metadata(meta)
    ref = AutoTokenizer.from_pretrained(str(vocab_dir), gguf_file=f"ggml-vocab-{name}.gguf")
    strings = corpus() + inp_strings(vocab_dir, name)
    tokens = meta["tokenizer.ggml.tokens"]
    bos = [meta["tokenizer.ggml.bos_token_id"]] if meta.get("tokenizer.ggml.add_bos_token") else []
    eos = [meta["tokenizer.ggml.eos_token_id"]] if meta.get("tokenizer.ggml.add_eos_token") else []
    bad = []
    for s in strings:
        pieces = ref(s, add_special_tokens=False)["input_ids"]
        if ours.encode(s, add_special_tokens=False).ids != pieces or ours.encode(s).ids != bos + pieces + eos:
            bad.append((s, pieces, ours.encode(s).ids))
    assert not bad, f"{len(bad)}/{len(strings)} differ; first {bad[0]!r}"
    assert len(ours.get_vocab()) == len(tokens)
    # Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes' <0xXX> tokens.
    ids = ours.encode("\U0001F999", add_special_tokens=False).ids
    assert [tokens[i] for i in ids][-4:] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"], [tokens[i] for i in ids]
    # fuselm's C++ tokenizer runs the written tokenizer.json as `tokenizers` does.
    path = tmp_path / "tokenizer.json"
    ours.save(str(path))
    assert check_tokenizer(path, tmp_path, strings) == len(strings)


@pytest.mark.parametrize("name", long_mode.split(["qwen2", "llama-bpe", "qwen35"], default=["qwen2"]))
def test_byte_level_gguf_tokenizer_with_a_split_regex(name, vocab_dir, tmp_path):  # noqa: F811
    """Byte-level BPE vocabularies whose tokenizer.ggml.pre names a split regex (qwen2, llama3's
    llama-bpe, qwen35): fuselm's tokenizer.json splits as transformers reads the same file (its
    GGUF_PRE_TOKENIZER_SPLITS), ids equal on the corpus and llama.cpp's test strings, and fuselm's
    C++ tokenizer runs that tokenizer.json as `tokenizers` does. Before, such files were refused."""
    from transformers import AutoTokenizer

    meta = read_gguf_metadata(vocab_dir / f"ggml-vocab-{name}.gguf")
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == name
    ours = tokenizer_from_gguf_metadata(meta)
    ref = AutoTokenizer.from_pretrained(str(vocab_dir), gguf_file=f"ggml-vocab-{name}.gguf")
    strings = corpus() + inp_strings(vocab_dir, name)
    n_vocab = len(meta["tokenizer.ggml.tokens"])
    bad = []
    for s in strings:
        want = ref(s, add_special_tokens=False)["input_ids"]
        # transformers' GPT-2 tokenizer class adds its own <|endoftext|> when the file has none (an id
        # past the file's vocabulary, which no model of this file has a row for): not the file's text
        if max(want, default=0) >= n_vocab:
            continue
        if ours.encode(s, add_special_tokens=False).ids != want:
            bad.append((s, want, ours.encode(s, add_special_tokens=False).ids))
    assert not bad, f"{len(bad)}/{len(strings)} differ; first {bad[0]!r}"
    path = tmp_path / "tokenizer.json"
    ours.save(str(path))
    assert check_tokenizer(path, tmp_path, strings) == len(strings)


def test_unknown_pre_tokenizer_is_one_line(vocab_dir):  # noqa: F811
    meta = read_gguf_metadata(vocab_dir / "ggml-vocab-qwen2.gguf")
    with pytest.raises(GgufPrepError, match=r"^tokenizer.ggml.pre = 'no-such-pre' is not supported; known: .*qwen2"):
        tokenizer_from_gguf_metadata(dict(meta, **{"tokenizer.ggml.pre": "no-such-pre"}))


def test_unknown_tokenizer_kind_is_one_line(vocab_dir):  # noqa: F811
    meta = read_gguf_metadata(vocab_dir / "ggml-vocab-llama-spm.gguf")
    with pytest.raises(GgufPrepError, match=r"^tokenizer.ggml.model = 'rwkv': transformers cannot build this tokenizer"):
        tokenizer_from_gguf_metadata(dict(meta, **{"tokenizer.ggml.model": "rwkv"}))
    with pytest.raises(GgufPrepError, match="has no tokenizer"):
        tokenizer_from_gguf_metadata({k: v for k, v in meta.items() if k != "tokenizer.ggml.tokens"})
