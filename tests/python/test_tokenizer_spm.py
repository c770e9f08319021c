"""Tokenizer parity beyond byte-level BPE: SentencePiece BPE (Metaspace style and Prepend/Replace
style), Unigram (with SentencePiece's precompiled charsmap) and WordPiece, against `tokenizers`.

Real vocabularies come from llama.cpp's source tree, which ships them as GGUF files
(models/ggml-vocab-*.gguf, with test strings in .inp files) inside the PyPI sdist of
llama-cpp-python. The sdist is fetched once with pip into a cache outside the repository
($FUSELM_TEST_CACHE, default ~/.cache/fuselm-test); the test is skipped, saying why, only when PyPI
cannot be reached. From the GGUF files:
- llama-spm and phi-3: transformers turns them into tokenizer.json (Metaspace pre-tokenizer, and
  Prepend + Replace normalizers), both with ByteFallback/Fuse/Strip decoders;
- nomic-bert-moe: an XLM-R Unigram vocabulary of 250k pieces and its precompiled charsmap,
  assembled here with `tokenizers` the way transformers' XLMRobertaConverter does;
- bert-bge: a BERT WordPiece vocabulary (llama.cpp stores word starts as "▁w"; undone here).
Small Unigram and WordPiece models are also trained with `tokenizers` (byte_fallback, the real
charsmap, Lowercase/NFD/StripAccents, Whitespace, max_input_chars_per_word), and variants are made
by editing the JSON (prepend_scheme always/never, split, added tokens with lstrip/rstrip/
single_word/normalized). Every check compares ids, decode, and the streamed decode one id at a time
(test_tokenizer.check_tokenizer) on the multilingual corpus of test_tokenizer plus llama.cpp's
test strings.
"""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402

from test_tokenizer import MULTILINGUAL, check_tokenizer, corpus, training_text  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
VOCAB_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"
CACHE = Path(os.environ.get("FUSELM_TEST_CACHE", Path.home() / ".cache" / "fuselm-test"))
VOCABS = ["llama-spm", "phi-3", "nomic-bert-moe", "bert-bge", "qwen2", "llama-bpe", "qwen35"]


def pypi_reachable():
    import socket
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
        return True
    except OSError:
        return False


def llama_cpp_sdist(what: str) -> Path:
    """The cached llama-cpp-python sdist (llama.cpp's whole source tree), downloaded once; the
    calling test is skipped, naming `what` it needed it for, only when PyPI cannot be reached."""
    tarball = CACHE / SDIST_FILE
    if not tarball.exists():
        if not pypi_reachable():
            pytest.skip(f"PyPI is unreachable: cannot download the {SDIST} sdist ({what})")
        CACHE.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST,
             "-d", str(CACHE)], capture_output=True, text=True, timeout=900)
        assert tarball.exists(), f"pip download {SDIST} failed:\n{res.stdout}\n{res.stderr}"
    return tarball


@pytest.fixture(scope="session")
def vocab_dir():
    """The llama.cpp models/ folder with the GGUF vocabularies used here, from the cached sdist."""
    out = CACHE / "llamacpp-vocab"
    if all((out / f"ggml-vocab-{v}.gguf").exists() for v in VOCABS):
        return out
    tarball = llama_cpp_sdist("llama.cpp's GGUF vocabularies; SentencePiece/Unigram/WordPiece parity not checked")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        for v in VOCABS:
            for suffix in (".gguf", ".gguf.inp"):
                try:
                    member = tar.getmember(f"{VOCAB_DIR}/ggml-vocab-{v}{suffix}")
                except KeyError:
                    continue
                data = tar.extractfile(member).read()
                (out / f"ggml-vocab-{v}{suffix}").write_bytes(data)
    return out


def inp_strings(vocab_dir, name):
    path = vocab_dir / f"ggml-vocab-{name}.gguf.inp"
    if not path.exists():
        return []
    return path.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")


def gguf_fields(path):
    reader = gguf.GGUFReader(str(path))

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def numbers(key):
        f = reader.fields[key]
        return [f.parts[i].tolist()[0] for i in f.data]

    def scalar(key):
        f = reader.fields[key]
        return f.parts[f.data[0]].tolist()[0]

    return strings, numbers, scalar


def charsmap_of(vocab_dir):
    reader = gguf.GGUFReader(str(vocab_dir / "ggml-vocab-nomic-bert-moe.gguf"))
    f = reader.fields["tokenizer.ggml.precompiled_charsmap"]
    return np.concatenate([f.parts[i] for i in f.data]).astype(np.uint8).tobytes()


def from_gguf_via_transformers(vocab_dir, name):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(vocab_dir), gguf_file=f"ggml-vocab-{name}.gguf")
    return json.loads(tok.backend_tokenizer.to_str())


def xlmr_unigram(vocab_dir):
    """nomic-bert-moe's XLM-R vocabulary as transformers' XLMRobertaConverter builds it."""
    strings, numbers, scalar = gguf_fields(vocab_dir / "ggml-vocab-nomic-bert-moe.gguf")
    pieces = strings("tokenizer.ggml.tokens")
    scores = numbers("tokenizer.ggml.scores")
    types = numbers("tokenizer.ggml.token_type")
    tok = Tokenizer(models.Unigram(list(zip(pieces, scores)),
                                   unk_id=scalar("tokenizer.ggml.unknown_token_id"),
                                   byte_fallback=False))
    tok.normalizer = normalizers.Sequence([
        normalizers.Precompiled(charsmap_of(vocab_dir)),
        normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = scalar("tokenizer.ggml.bos_token_id"), scalar("tokenizer.ggml.eos_token_id")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)])
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False)
                            for p, t in zip(pieces, types) if t == 3])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    assert tok.get_vocab_size() == len(pieces)
    return json.loads(tok.to_str())


def bge_wordpiece(vocab_dir):
    """bert-bge's BERT vocabulary; llama.cpp wrote word starts as "▁w" and continuations bare."""
    strings, numbers, scalar = gguf_fields(vocab_dir / "ggml-vocab-bert-bge.gguf")
    vocab = {}
    for i, (t, kind) in enumerate(zip(strings("tokenizer.ggml.tokens"),
                                      numbers("tokenizer.ggml.token_type"))):
        if kind == 1 and not (t.startswith("[") and t.endswith("]")):
            t = t[1:] if t.startswith("▁") else "##" + t
        vocab.setdefault(t, i)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]),
                                                   ("[CLS]", vocab["[CLS]"]))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return json.loads(tok.to_str())


def trained_unigram(charsmap):
    """A small Unigram over text without CJK, so CJK falls back to bytes; the real charsmap."""
    # Unigram training is slow: a tenth of the stdlib sources is enough for 1000 pieces.
    texts = [t[:20000] for t in training_text()[:8]] + [
        t for t in training_text()[60:] if not any("\u3040" <= c <= "\u9fff" for c in t)]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),
                                           normalizers.Replace(" ", "▁"),
                                           normalizers.Prepend("▁")])
    trainer = trainers.UnigramTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"],
                                      unk_token="<unk>", show_progress=False, max_piece_length=8)
    tok.train_from_iterator(texts, trainer)
    spec = json.loads(tok.to_str())
    # SentencePiece's byte_fallback: 256 "<0xXX>" pieces scored below every learned piece.
    low = min(score for _, score in spec["model"]["vocab"]) - 1
    spec["model"]["vocab"] += [[f"<0x{b:02X}>", low] for b in range(256)]
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return spec


def trained_wordpiece():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=12))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                           normalizers.StripAccents(),
                                           normalizers.Strip(left=True, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.WordPieceTrainer(vocab_size=2000, show_progress=False,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(training_text(), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.add_tokens([AddedToken("[MASK]", lstrip=True, special=True, normalized=False)])
    return json.loads(tok.to_str())


def with_added_tokens(spec):
    """Adds tokens with every matching option to a tokenizer.json, through `tokenizers`."""
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_special_tokens([AddedToken("<|im_start|>", normalized=False, special=True),
                            AddedToken("<|im_end|>", rstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("hello world", single_word=True, normalized=True),
                    AddedToken("café", normalized=True)])
    return json.loads(tok.to_str())


def edited(spec, **pre):
    spec = json.loads(json.dumps(spec))
    spec["pre_tokenizer"].update(pre)
    return spec


SPM_EXTRA = [
    " Hello", "  Hello", "Hello ", " ", "▁", "▁▁x", "a▁b", "<s>", "<s> hi</s>", "<unk>",
    "<0x41>", "hello world", "hello worlds", "<tool> x <tool>", "café e\u0301", "İstanbul ǅ ẞ",
    "\u0000 nul", "\ufeffbom", "tab\tx\u000bvt", "ﬁ ﬀ ㎏ ① Ⅻ ｶﾀｶﾅ",
    "\U0001F600\u200d",
    "[CLS] [SEP] [MASK] [UNK]", "x [MASK] y", "don't do not it's they're", "a.b,c!d?e",
]


@pytest.fixture(scope="module")
def spm_specs(vocab_dir):
    llama = from_gguf_via_transformers(vocab_dir, "llama-spm")
    phi3 = from_gguf_via_transformers(vocab_dir, "phi-3")
    assert llama["pre_tokenizer"]["type"] == "Metaspace", llama["pre_tokenizer"]
    assert [n["type"] for n in phi3["normalizer"]["normalizers"]] == ["Prepend", "Replace"]
    return {
        "llama_spm": llama,
        "llama_spm_added": with_added_tokens(llama),
        "llama_spm_always_split": edited(llama, prepend_scheme="always", split=True),
        "llama_spm_never": edited(llama, prepend_scheme="never"),
        "phi3": phi3,
        "phi3_added": with_added_tokens(phi3),
    }


def run_check(spec, tmp_path, strings):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return check_tokenizer(path, tmp_path, strings)


@pytest.mark.parametrize("name", ["llama_spm", "llama_spm_added", "llama_spm_always_split",
                                  "llama_spm_never", "phi3", "phi3_added"])
def test_sentencepiece_bpe(name, spm_specs, vocab_dir, tmp_path):
    strings = corpus() + SPM_EXTRA + inp_strings(vocab_dir, name.split("_")[0].replace(
        "llama", "llama-spm").replace("phi3", "phi-3"))
    assert run_check(spm_specs[name], tmp_path, strings) > 900


def test_long_unigram_xlmr(vocab_dir, tmp_path):
    strings = (corpus() + SPM_EXTRA + inp_strings(vocab_dir, "nomic-bert-moe")
               + ["<mask>", "a <mask>"])
    run_check(xlmr_unigram(vocab_dir), tmp_path, strings)


def test_unigram_trained_byte_fallback(vocab_dir, tmp_path):
    spec = trained_unigram(charsmap_of(vocab_dir))
    oracle = Tokenizer.from_str(json.dumps(spec))
    # The check must exercise byte fallback: CJK is outside the learned pieces.
    ids = oracle.encode(MULTILINGUAL[6]).ids
    assert any(oracle.id_to_token(i).startswith("<0x") for i in ids)
    run_check(spec, tmp_path, corpus() + SPM_EXTRA)


def test_wordpiece_bge(vocab_dir, tmp_path):
    strings = corpus() + SPM_EXTRA + inp_strings(vocab_dir, "bert-bge")
    run_check(bge_wordpiece(vocab_dir), tmp_path, strings)


def test_wordpiece_trained(tmp_path):
    run_check(trained_wordpiece(), tmp_path, corpus() + SPM_EXTRA + ["supercalifragilistic x"])


def test_cli_text_sentencepiece(spm_specs, tmp_path):
    """`fuselm tokenize MODEL_DIR --text` on a SentencePiece tokenizer."""
    from test_tokenizer import run_cli
    (tmp_path / "tokenizer.json").write_text(json.dumps(spm_specs["llama_spm"]), encoding="utf-8")
    oracle = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "Hello world, 你好 🌍"
    res = run_cli(str(tmp_path), "--text", text)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == ",".join(map(str, oracle.encode(text).ids)) + "\n"


def test_refusals(tmp_path):
    """What is not supported is refused with the field named."""
    from test_tokenizer import run_cli
    base = {"model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 0}}
    cases = [
        ({**base, "decoder": {"type": "Sequence", "decoders": [
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 0, "stop": 1}]}},
         "decoder.decoders[1].stop > 0 after Fuse is not supported"),
        ({**base, "decoder": {"type": "CTC"}}, "decoder.type 'CTC' is not supported"),
        ({**base, "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAAAAAA"}},
         "normalizer.precompiled_charsmap: trie size 0 does not fit the 6-byte blob"),
        ({**base, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                                    "prepend_scheme": "sometimes"}},
         "pre_tokenizer.prepend_scheme 'sometimes' is not supported"),
        ({"model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 3}},
         "model.unk_id is not an id of model.vocab"),
        ({"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"}},
         "model.unk_token '[UNK]' is not in model.vocab"),
    ]
    for spec, message in cases:
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        res = run_cli(str(path), "--text", "a")
        assert res.returncode == 1, spec
        assert res.stderr.decode().strip() == f"fuselm: error: {path}: {message}"
