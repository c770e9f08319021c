"""Model prep: turn a GGUF file into an HF model directory.

The directory is what both transformers and fuselm's C++ engine read: config.json,
model.safetensors (fp32), tokenizer.json, tokenizer_config.json, generation_config.json.

- Weights go through transformers' own GGUF loader, which dequantizes to fp32 and, for llama-arch
  files, undoes llama.cpp's q/k row permutation. Tied embeddings stay tied (no lm_head in the file).
- tokenizer.json is built here from the GGUF vocabulary arrays, because the tokenizer transformers
  rebuilds from a GGUF ignores `tokenizer.ggml.pre` (SmolLM's digit splitting is lost) and swaps
  bos/eos. Byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is built here; every other kind
  (SentencePiece "llama", Unigram "t5", ...) goes through transformers' own GGUF tokenizer builder
  (`convert_gguf_tokenizer`, the tokenizer `from_pretrained(..., gguf_file=...)` makes), with the
  file's add_bos/add_eos flags; a kind transformers cannot build is refused with one line.
- eos/bos ids come from the GGUF metadata; the chat template's end-of-turn token joins
  generation_config's eos list when it differs from eos.

The output is written to a temporary sibling directory and renamed into place, with a marker file
recording the GGUF's size and mtime, so an interrupted run leaves nothing half-written and a second
run with the same GGUF does no work.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

MARKER = "fuselm-gguf-source.json"
PREP_VERSION = 1  # bump when the output changes, so existing directories are rebuilt

# tokenizer.ggml.token_type values (gguf.TokenType)
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# tokenizer.ggml.pre → pre-tokenizer. The regexes are llama.cpp's (llama-vocab.cpp):
# "digits": `\p{N}` then the GPT-2 regex, i.e. each digit on its own (StarCoder/SmolLM tokenizers).
# "gpt2":   the GPT-2 regex alone.
# llama.cpp's own "default" type adds punctuation and 3-digit splits to the GPT-2 regex; here
# "default" means HF's plain byte-level GPT-2 pre-tokenizer, which is what transformers uses.
# Any other name transformers knows (qwen2, llama3, tekken, gpt-4o, ...) takes transformers' split
# regex for it (_split_regex).
PRE_TOKENIZERS = {
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "command-r": "digits",
    "codeshell": "digits", "exaone": "digits", "minerva": "digits",
    "gpt2": "gpt2", "default": "gpt2", "mpt": "gpt2", "olmo": "gpt2", "jais": "gpt2",
    "trillion": "gpt2",
}


class GgufPrepError(RuntimeError):
    pass


def _transformers_splits() -> dict[str, str]:
    """tokenizer.ggml.pre -> the split regex transformers' GGUF tokenizer builder applies before its
    byte-level step (GGUF_PRE_TOKENIZER_SPLITS: llama3, qwen2, tekken, gpt-4o, ...; llama.cpp's
    regexes of the same names), or {} when the installed transformers has no such table."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:
        return {}
    return dict(GGUF_PRE_TOKENIZER_SPLITS)


def _split_regex(pre: str) -> str | None:
    """The split regex of a tokenizer.ggml.pre that PRE_TOKENIZERS does not name, as transformers
    reads it (_transformers_splits), or None."""
    return None if pre in PRE_TOKENIZERS else _transformers_splits().get(pre)


def log(msg: str) -> None:
    print(f"fuselm: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# GGUF metadata


def read_gguf_metadata(gguf_path) -> dict:
    """All key/value metadata of a GGUF file as Python values (arrays as lists)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.")}


# ---------------------------------------------------------------------------------------------
# Tokenizer


def _tokenizer_via_transformers(meta: dict):
    """Any other tokenizer.ggml.model: transformers' GGUF builder on the same metadata (its
    GGUF_TOKENIZER_MAPPING), as from_pretrained(..., gguf_file=...) builds it."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (GGUF_TOKENIZER_MAPPING,
                                                                         convert_gguf_tokenizer)

    kind = meta.get("tokenizer.ggml.model")
    tokenizer_dict = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if f"tokenizer.{key}" in meta}
    try:
        tok, _ = convert_gguf_tokenizer(meta["general.architecture"], tokenizer_dict)
    except (ValueError, KeyError, TypeError) as e:
        raise GgufPrepError(f"tokenizer.ggml.model = {kind!r}: transformers cannot build this tokenizer "
                            f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from e
    return tok


def _post_processor(meta: dict, tok, vocab: dict):
    """bos/eos around each sequence as the file's add_bos_token / add_eos_token say, or None."""
    from tokenizers import processors

    tokens = meta["tokenizer.ggml.tokens"]
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    eos_id = meta.get("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False)) and bos_id is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and eos_id is not None
    if not (add_bos or add_eos):
        return None
    bos, eos = (tokens[bos_id] if add_bos else None), (tokens[eos_id] if add_eos else None)
    single = " ".join(x for x in (bos and f"{bos}:0", "$A:0", eos and f"{eos}:0") if x)
    pair = single + " " + " ".join(x for x in (bos and f"{bos}:1", "$B:1", eos and f"{eos}:1") if x)
    specials = [(t, vocab[t]) for t in dict.fromkeys(x for x in (bos, eos) if x)]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def tokenizer_from_gguf_metadata(meta: dict):
    """A `tokenizers.Tokenizer` with the GGUF vocabulary's semantics: byte-level BPE built here,
    other kinds by transformers' GGUF builder (module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    model_kind = meta.get("tokenizer.ggml.model")
    if model_kind is None or "tokenizer.ggml.tokens" not in meta:
        raise GgufPrepError("the GGUF has no tokenizer (tokenizer.ggml.model / tokenizer.ggml.tokens missing)")
    if model_kind != "gpt2":
        tok = _tokenizer_via_transformers(meta)
        tokens = meta["tokenizer.ggml.tokens"]
        vocab = {t: i for i, t in enumerate(tokens)}
        for i in (meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")):
            if i is not None and tok.token_to_id(tokens[i]) != i:
                raise GgufPrepError(f"tokenizer.ggml.model = {model_kind!r}: token {tokens[i]!r} lost its id {i}")
        post = _post_processor(meta, tok, vocab)
        if post is not None or "tokenizer.ggml.add_bos_token" in meta:
            tok.post_processor = post
        return tok
    pre = meta.get("tokenizer.ggml.pre", "default")
    split = _split_regex(pre)
    if pre not in PRE_TOKENIZERS and split is None:
        raise GgufPrepError(f"tokenizer.ggml.pre = {pre!r} is not supported; known: "
                            f"{', '.join(sorted(set(PRE_TOKENIZERS) | set(_transformers_splits())))}")

    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GgufPrepError("tokenizer.ggml.tokens has duplicate entries")
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre not in PRE_TOKENIZERS:  # the split regex transformers reads the file with
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(split), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    elif PRE_TOKENIZERS[pre] == "digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()

    # Control tokens are special (skipped when decoding with skip_special_tokens); user-defined
    # ones are matched on the raw text like llama.cpp does, but stay ordinary text.
    added = [AddedToken(tokens[i], special=(t == TOKEN_TYPE_CONTROL), normalized=False)
             for i, t in enumerate(types) if t in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)]
    tok.add_tokens(added)  # already in the vocabulary, so their ids are kept
    for a in added:
        if tok.token_to_id(a.content) != vocab[a.content]:
            raise GgufPrepError(f"added token {a.content!r} changed id")

    post = _post_processor(meta, tok, vocab)
    tok.post_processor = post if post is not None else processors.ByteLevel(trim_offsets=False)
    return tok


def _end_of_turn_id(meta: dict, tok) -> int | None:
    """The token that closes an assistant turn: GGUF's eot id, else read off the chat template."""
    if meta.get("tokenizer.ggml.eot_token_id") is not None:
        return int(meta["tokenizer.ggml.eot_token_id"])
    template = meta.get("tokenizer.chat_template")
    if not template:
        return None
    from transformers import PreTrainedTokenizerFast

    marker = "fuselm-end-of-turn-probe"
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template)
    try:
        text = hf.apply_chat_template([{"role": "user", "content": marker},
                                       {"role": "assistant", "content": marker}], tokenize=False)
    except Exception as e:  # a template that cannot render a plain exchange: eos alone stops turns
        log(f"warning: could not render the chat template to find its end-of-turn token: {e}")
        return None
    after = text[text.rindex(marker) + len(marker):]
    ids = tok.encode(after, add_special_tokens=False).ids
    specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    if ids and tok.id_to_token(ids[0]) in specials:
        return ids[0]
    return None


# ---------------------------------------------------------------------------------------------
# Conversion


def _source_stamp(gguf_path: Path) -> dict:
    st = gguf_path.stat()
    return {"gguf": gguf_path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "prep_version": PREP_VERSION}


def _read_marker(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None


def is_prepared(gguf_path, out_dir) -> bool:
    """True when out_dir holds a complete conversion of this very GGUF (same size and mtime)."""
    marker = _read_marker(Path(out_dir))
    if marker is None:
        return False
    stamp = _source_stamp(Path(gguf_path))
    return all(marker.get(k) == v for k, v in stamp.items())


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _remove_stale_temps(out_dir: Path) -> None:
    """Temp dirs left by runs that were killed (their pid is gone)."""
    leftovers = [*out_dir.parent.glob(f".{out_dir.name}.tmp-*"),
                 *out_dir.parent.glob(f".{out_dir.name}.old-*")]
    for p in leftovers:
        try:
            pid = int(p.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        shutil.rmtree(p, ignore_errors=True)


def _write_weights(gguf_path: Path, meta: dict, out: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        raise GgufPrepError("transformers' GGUF loader needs accelerate; run: "
                            ".venv/bin/pip install accelerate==1.15.0")
    import torch
    from transformers import AutoModelForCausalLM

    from gguf import GGUFReader

    from .gguf_rope_factors import FACTORS_TENSOR, file_tensor
    from .gguf_source import GgufSourceError, gguf_config

    reader = GGUFReader(str(gguf_path))
    if file_tensor(reader, FACTORS_TENSOR) is not None:
        raise GgufPrepError(f"{gguf_path}: its tensor '{FACTORS_TENSOR}' (RoPE frequency factors) has no place in a "
                            f"transformers model directory; run the file as it is: fuselm generate {gguf_path}")
    try:
        config = gguf_config(gguf_path, reader=reader)  # with the RoPE fields transformers' mapping drops
    except GgufSourceError as e:
        raise GgufPrepError(f"{gguf_path}: {e}") from None
    log("dequantizing weights to fp32 with transformers' GGUF loader")
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=str(gguf_path),
                                                  config=config, dtype=torch.float32)
    # The GGUF load leaves a quantizer on the model and a `quantization_config` in its config, which
    # forbid saving and would send later loads back to the GGUF path. Move the dequantized weights
    # into a plain model of the same config instead.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.bos_token_id = meta.get("tokenizer.ggml.bos_token_id")
    config.eos_token_id = meta.get("tokenizer.ggml.eos_token_id")
    if "tokenizer.ggml.padding_token_id" in meta:
        config.pad_token_id = meta["tokenizer.ggml.padding_token_id"]
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()
    missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
    tied = set(getattr(plain, "_tied_weights_keys", None) or {}) if config.tie_word_embeddings else set()
    if unexpected or set(missing) - tied:
        raise GgufPrepError(f"weights do not fit the model: missing {sorted(missing)[:5]}, "
                            f"unexpected {sorted(unexpected)[:5]}")
    plain.tie_weights()
    plain.eval()
    plain.save_pretrained(str(out))
    del loaded, plain, state


def _write_tokenizer_and_generation(meta: dict, out: Path) -> None:
    from transformers import GenerationConfig

    tok = tokenizer_from_gguf_metadata(meta)
    tok.save(str(out / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key):
        i = meta.get(key)
        return tokens[i] if i is not None else None

    cfg = {"tokenizer_class": "TokenizersBackend",  # load tokenizer.json verbatim in transformers v5
           "bos_token": token("tokenizer.ggml.bos_token_id"),
           "eos_token": token("tokenizer.ggml.eos_token_id"),
           "unk_token": token("tokenizer.ggml.unknown_token_id"),
           "pad_token": token("tokenizer.ggml.padding_token_id"),
           "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
           "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
           "clean_up_tokenization_spaces": False}
    arch = meta["general.architecture"]
    if f"{arch}.context_length" in meta:
        cfg["model_max_length"] = int(meta[f"{arch}.context_length"])
    if meta.get("tokenizer.chat_template"):
        cfg["chat_template"] = meta["tokenizer.chat_template"]
    _write_json(out / "tokenizer_config.json", {k: v for k, v in cfg.items() if v is not None})

    eos = meta.get("tokenizer.ggml.eos_token_id")
    eot = _end_of_turn_id(meta, tok)
    gen = GenerationConfig(bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
                           eos_token_id=eos if eot in (None, eos) else [eos, eot],
                           pad_token_id=meta.get("tokenizer.ggml.padding_token_id"))
    gen.save_pretrained(str(out))


def gguf_to_hf_dir(gguf_path, out_dir) -> Path:
    """Convert gguf_path into the HF model directory out_dir; no work when it is already done.

    out_dir is replaced only when it holds an earlier conversion by this function (of another
    version of the GGUF); any other existing directory is an error.
    """
    gguf_path, out_dir = Path(gguf_path).resolve(), Path(out_dir).absolute()
    if not gguf_path.is_file():
        raise GgufPrepError(f"no GGUF file at {gguf_path}")
    if is_prepared(gguf_path, out_dir):
        _make_readable(out_dir)  # also an earlier conversion, written before files were made readable
        return out_dir
    if out_dir.exists() and _read_marker(out_dir) is None:
        raise GgufPrepError(f"{out_dir} exists and is not a fuselm conversion; remove it or "
                            f"choose another output directory")

    start = time.monotonic()
    log(f"converting {gguf_path.name} to an HF model directory at {out_dir} (one-time)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        meta = read_gguf_metadata(gguf_path)
        _write_weights(gguf_path, meta, tmp)
        _write_tokenizer_and_generation(meta, tmp)
        _write_json(tmp / MARKER, {**_source_stamp(gguf_path), "source": str(gguf_path)})
        _make_readable(tmp)
        _install(tmp, out_dir, gguf_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out_dir} ({_dir_size(out_dir) / 2**20:.0f} MiB) in {time.monotonic() - start:.1f} s")
    return out_dir


def _make_readable(out_dir: Path) -> None:
    """Every file readable and the directory searchable by all users, as a shared model must be
    (transformers' save_pretrained leaves model.safetensors 0600)."""
    for p in [out_dir, *out_dir.iterdir()]:
        mode = p.stat().st_mode
        want = mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        if p.is_dir():
            want |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        if want != mode:
            os.chmod(p, stat.S_IMODE(want))


def _install(tmp: Path, out_dir: Path, gguf_path: Path) -> None:
    """Rename tmp to out_dir; an older conversion there is moved aside first, then deleted."""
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        out_dir.rename(old)
    try:
        tmp.rename(out_dir)
    except OSError:
        if not is_prepared(gguf_path, out_dir):  # not a concurrent run that finished first
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
