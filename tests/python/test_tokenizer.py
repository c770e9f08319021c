"""Tokenizer parity: `fuselm tokenize` against the Hugging Face `tokenizers` library.

Each test tokenizer.json is built with `tokenizers` itself (a small BPE trained on Python's own
standard library sources, plus multilingual text) in the configurations of the model families we
serve: GPT-2 (ByteLevel), Llama-3 (Split regex + ByteLevel without regex + TemplateProcessing BOS),
Qwen2 (NFC + Split + ByteLevel), SmolLM/StarCoder (Digits + ByteLevel), with special and added
tokens (lstrip/rstrip/single_word/normalized), and variants made by editing the JSON (legacy "a b"
merges, add_prefix_space, other Split behaviors). For every string of a multilingual corpus the ids
must equal `Tokenizer.encode`, and decode (plain, skipping special tokens, and streamed one id at a
time) must equal `Tokenizer.decode`.

The binary is build/fuselm (override with FUSELM_BIN); the test fails if it is missing.
If models/SmolLM2-135M-Instruct/tokenizer.json exists, the real SmolLM2 tokenizer is checked too.
"""

import json
import os
import random
import subprocess
import sysconfig
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FUSELM = Path(os.environ.get("FUSELM_BIN", REPO / "build" / "fuselm"))
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct" / "tokenizer.json"

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's, we'll, they're, I'd, you've, I'm, she's.",
    "IT'S WE'LL THEY'RE I'D YOU'VE I'M SHE'S ſ'S",
    "Le cœur déçu mais l'âme plutôt naïve, Louÿs rêva de crapaüter en canoë au delà des îles.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナとひらがな。",
    "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق.",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "עטלף אבק נס דרך מזגן שהתפוצץ כי חם",
]
SPECIAL_TEXTS = [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|endoftext|>",
    "text<|endoftext|>more text <|endoftext|> spaced",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start <|im_end| |endoftext|> <|unknown|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "call   <tool>   now<tool>x <tool>",
    "a [MASK] b   [MASK]c",
    "say hello world, hello worlds, xhello world, hello world!",
    "café vs cafe\u0301 vs CAFÉ, e\u0301te\u0301 and été",
    "fuse fuselm fuse.",
    "<repo_name>fuselm<file_sep>src/main.cc",
]
CODE = [
    "def f(x):\n\treturn x ** 2  # square\n\n\nclass A:\n    pass\n",
    "int main() {\n  for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n  return 0;\n}\n",
    "    if (a && b) { x[3] = y->z; }  // trailing   \n\n\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{v:?}\"); }",
]
NUMBERS = [
    "0", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42", "1e-9",
    "٣٤٥ ١٢ ۱۲۳", "１２３ ² ½ Ⅻ ⑦", "2024-01-01T12:34:56Z", "v1.2.3", "0x1F600", "a1b2c3",
]
WHITESPACE = [
    "", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "a  b", "a   b    c", "a\tb\t\tc",
    "  leading", "trailing  ", "\u00a0nbsp\u00a0", "ideographic\u3000space", "line\u2028sep",
    "x" + " " * 300 + "y", "\n" * 50, "tab\t \t mix\r\n\r\nend", " \t\n",
]
EMOJI = [
    "👋 hello 🌍", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 skin", "🇯🇵🇫🇷 flags", "❤️ heart", "😀😃😄😁",
    "🧑🏿‍🚀 astronaut", "#️⃣ keycap", "e\u0301\u0301\u0301 stacked", "Z\u0351\u0352\u0353algo",
]


def training_text():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:60]
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    texts += MULTILINGUAL * 20 + CODE * 20 + NUMBERS * 10 + EMOJI * 10
    return texts


def held_out_lines():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[60:75]
    lines, chunks = [], []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        lines += text.splitlines(keepends=True)[:40]
        chunks.append(text[:20000])
    return lines, chunks


ATOMS = (
    list("abcXYZ éüñßøÆ") + ["e\u0301", "a\u0308", "\u0301", "ſ", "'s", "'LL", "'t", "n't"]
    + list("中文字日本語한국어") + ["\u1100\u1161\u11a8"]  # decomposed Hangul jamo (NFC composes)
    + list("مرحبا") + ["नमस्ते", "क्षि", "ภาษาไทย", "Ωμέγα", "Жизнь"]
    + list("0123456789") + ["١٢٣", "１２", "²", "½", "Ⅻ", "⑦"]
    + [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u200b", "\u200d"]
    + list(".,;:!?-_()[]{}<>/\\|\"'`~@#$%^&*+=")
    + ["👋", "🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "\ufe0f", "😀"]
    + ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<tool>",
       "[MASK]", "hello world", "café", "fuse", "<|im_", "|>", "<tool"]
)


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 25)
        out.append("".join(rng.choice(ATOMS) for _ in range(k)))
    return out


def corpus():
    lines, chunks = held_out_lines()
    return (MULTILINGUAL + SPECIAL_TEXTS + CODE + NUMBERS + WHITESPACE + EMOJI
            + lines + chunks + random_strings(400, seed=1234))


def train(pre_tokenizer, special_tokens, normalizer=None, vocab_size=3000):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    return tok


def build_gpt2():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), ["<|endoftext|>"])
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    return json.loads(tok.to_str())


def build_llama3():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"]
    tok = train(pre, specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    tok.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False)])
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    return spec


def build_qwen2():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train(pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC())
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
    tok.add_tokens([
        AddedToken("hello world", single_word=True),                # normalized, not special
        AddedToken("café", normalized=True),                        # matches cafe + U+0301 after NFC
        AddedToken("e\u0301te\u0301", normalized=True),             # content not in NFC
        AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
    ])
    return json.loads(tok.to_str())


def build_smollm():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok = train(pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>"])
    tok.add_tokens([AddedToken("fuse", single_word=True, normalized=False)])
    return json.loads(tok.to_str())


def legacy_merges(spec):
    spec = json.loads(json.dumps(spec))
    spec["model"]["merges"] = [" ".join(pair) for pair in spec["model"]["merges"]]
    return spec


def with_pre(spec, pre):
    spec = json.loads(json.dumps(spec))
    spec["pre_tokenizer"] = pre
    return spec


BYTE_LEVEL_NO_REGEX = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                       "use_regex": False}


def split_variant(pattern, behavior, invert=False):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert},
        BYTE_LEVEL_NO_REGEX]}


@pytest.fixture(scope="module")
def specs():
    gpt2, llama3, qwen2, smollm = build_gpt2(), build_llama3(), build_qwen2(), build_smollm()
    out = {
        "gpt2": legacy_merges(gpt2),
        "gpt2_prefix_space": with_pre(gpt2, {"type": "ByteLevel", "add_prefix_space": True,
                                             "trim_offsets": True, "use_regex": True}),
        "llama3": llama3,
        "qwen2": qwen2,
        "smollm": smollm,
        "digits_contiguous": with_pre(smollm, {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": True}]}),
        "split_removed": with_pre(llama3, split_variant({"String": " "}, "Removed")),
        "split_merged_previous": with_pre(llama3, split_variant({"String": " "}, "MergedWithPrevious")),
        "split_merged_next": with_pre(llama3, split_variant({"Regex": r"\s+"}, "MergedWithNext")),
        "split_contiguous": with_pre(llama3, split_variant({"Regex": r"\p{P}"}, "Contiguous")),
        "split_invert": with_pre(llama3, split_variant({"Regex": r"\p{L}+|\p{N}+"}, "Removed", True)),
    }
    return out


def run_fuselm(path, lines, no_special, tmp_path):
    assert FUSELM.exists(), (
        f"{FUSELM} is missing: build first (cmake -S . -B build -G Ninja && ninja -C build)")
    inp = tmp_path / "input.jsonl"
    inp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                   encoding="utf-8")
    cmd = [str(FUSELM), "tokenize", str(path), "--jsonl", str(inp)]
    if no_special:
        cmd.append("--no-special")
    res = subprocess.run(cmd, capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")
    out = res.stdout.decode("utf-8").split("\n")[:-1]  # not splitlines: U+2028 is data
    assert len(out) == len(lines)
    return [json.loads(line) for line in out]


def check_tokenizer(path, tmp_path, strings):
    """Compares encode, decode and streamed decode with `tokenizers`; returns the strings count."""
    oracle = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
    rng = random.Random(99)
    bound = oracle.get_vocab_size(with_added_tokens=True)
    random_ids = [[rng.randrange(bound) for _ in range(rng.randint(1, 12))] for _ in range(150)]
    random_ids.append([bound + 5, 0])  # unknown ids are skipped
    for no_special in (False, True):
        add_special = not no_special
        expected = [e.ids for e in oracle.encode_batch(strings, add_special_tokens=add_special)]
        got = run_fuselm(path, strings, no_special, tmp_path)
        mismatches = [(s, e, g) for s, e, g in zip(strings, expected, got) if e != g]
        assert not mismatches, (
            f"{len(mismatches)}/{len(strings)} encodings differ (add_special_tokens={add_special}); "
            f"first: {mismatches[0][0]!r}\n expected {mismatches[0][1]}\n got      {mismatches[0][2]}")

        id_lists = expected + random_ids
        decoded = run_fuselm(path, id_lists, no_special, tmp_path)
        for ids, d in zip(id_lists, decoded):
            want = oracle.decode(ids, skip_special_tokens=no_special)
            assert d["text"] == want, f"decode({ids}, skip_special={no_special})"
            assert "".join(d["stream"]) == want, f"stream decode({ids}) = {d['stream']}"
            if "\ufffd" not in want:
                assert all("\ufffd" not in c for c in d["stream"]), d["stream"]
    return len(strings)


@pytest.mark.parametrize("name", [
    "gpt2", "gpt2_prefix_space", "llama3", "qwen2", "smollm", "digits_contiguous", "split_removed",
    "split_merged_previous", "split_merged_next", "split_contiguous", "split_invert"])
def test_matches_tokenizers(name, specs, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(specs[name], ensure_ascii=False), encoding="utf-8")
    strings = corpus()
    check_tokenizer(path, tmp_path, strings)


def test_round_trip(specs, tmp_path):
    strings = corpus()
    for name in ("gpt2", "llama3", "smollm", "qwen2"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(specs[name], ensure_ascii=False), encoding="utf-8")
        ids = run_fuselm(path, strings, True, tmp_path)
        texts = run_fuselm(path, ids, False, tmp_path)
        nfc = Tokenizer.from_file(str(path)).normalizer
        for s, t in zip(strings, texts):
            want = nfc.normalize_str(s) if nfc is not None else s
            if any(t in want for t in ("<tool>", "[MASK]", "café", "été")):
                # lstrip/rstrip tokens swallow the whitespace around them, and ByteLevel decodes an
                # added token whose characters are all in its alphabet ("é" is byte 0xE9) as bytes,
                # in tokenizers as here (test_matches_tokenizers compares those with tokenizers).
                continue
            assert t["text"] == want, f"{name}: round trip of {s!r}"


def test_real_smollm2(tmp_path):
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} not present; the real SmolLM2 tokenizer was not checked")
    check_tokenizer(SMOLLM2, tmp_path, corpus())
    check_tokenizer(SMOLLM2.parent, tmp_path, ["<|im_start|>user\nHi<|im_end|>"])


def run_cli(*args):
    assert FUSELM.exists(), f"{FUSELM} is missing: build first"
    return subprocess.run([str(FUSELM), "tokenize", *args], capture_output=True, timeout=120)


def test_cli_formats(specs, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(specs["llama3"]), encoding="utf-8")
    oracle = Tokenizer.from_file(str(path))
    text = "Hello world<|eot_id|>"
    ids = oracle.encode(text).ids
    res = run_cli(str(tmp_path), "--text", text)  # a directory holding tokenizer.json
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == ",".join(map(str, ids)) + "\n"
    res = run_cli(str(path), "--text", text, "--json", "--no-special")
    assert json.loads(res.stdout) == {"ids": oracle.encode(text, add_special_tokens=False).ids}
    f = tmp_path / "input.txt"
    f.write_bytes(text.encode())
    assert run_cli(str(path), "--file", str(f)).stdout.decode() == ",".join(map(str, ids)) + "\n"
    res = run_cli(str(path), "--decode", ",".join(map(str, ids)))
    assert res.stdout.decode() == oracle.decode(ids, skip_special_tokens=False) + "\n"
    res = run_cli(str(path), "--decode", ",".join(map(str, ids)), "--no-special", "--json")
    assert json.loads(res.stdout) == {"text": oracle.decode(ids, skip_special_tokens=True)}


def test_cli_errors(specs, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "WordLevel", "vocab": {}}}')
    res = run_cli(str(bad), "--text", "x")
    assert res.returncode == 1
    assert res.stderr.decode().strip() == (
        f"fuselm: error: {bad}: model type 'WordLevel' is not supported")
    bad.write_text('{"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b"]]}}')
    res = run_cli(str(bad), "--text", "x")
    assert res.returncode == 1
    assert res.stderr.decode().strip() == (
        f"fuselm: error: {bad}: model.vocab[1] must be a pair [piece, score]")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(specs["gpt2"]))
    res = run_cli(str(good), "--text", b"\xff\xfe bad")
    assert res.returncode == 1 and b"not valid UTF-8" in res.stderr
    res = run_cli(str(good), "--decode", "1,x")
    assert res.returncode == 1 and b"'x' is not a token id" in res.stderr
