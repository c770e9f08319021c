"""python -m fuselm_capture.gguf_dir MODEL.gguf --out DIR: a model directory that runs a GGUF as it is.

DIR gets what the engine reads besides the weights, all from the GGUF's metadata: config.json
(transformers' GGUF config mapping, gguf_source.gguf_config), tokenizer.json, tokenizer_config.json
(with the chat template) and generation_config.json (built as gguf_prep builds them), and
model.gguf, a symbolic link to the file itself: the weights are read from it at load, quantized
blocks kept as they are (no conversion). Capture then maps each parameter to its GGUF tensor
(capture.py). Idempotent: a directory made from the same file (path, size, mtime) is left as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from .gguf_prep import (GgufPrepError, _install, _make_readable, _read_marker, _source_stamp, _write_json,
                        _write_tokenizer_and_generation, read_gguf_metadata)

MARKER = "fuselm-gguf-source.json"
KIND = "gguf-direct"
# Bumped when the directory's config.json is made differently (2: the file's RoPE fields put back;
# 3: every architecture field checked, the ones the mapping drops put back), so that a directory
# made before is made again.
LAYOUT = 3


def _stamp(gguf: Path) -> dict:
    return {**_source_stamp(gguf), "source": str(gguf), "kind": KIND, "layout": LAYOUT}


def is_current(gguf: Path, out: Path) -> bool:
    marker = _read_marker(out)
    return marker is not None and all(marker.get(k) == v for k, v in _stamp(gguf).items())


def write_config(gguf: Path, meta: dict, out: Path) -> None:
    from .gguf_source import gguf_config

    notes: list[str] = []
    config = gguf_config(gguf, notes)
    for line in notes:
        print(f"fuselm: {gguf.name}: the file's {line} (transformers' GGUF config mapping drops it)",
              file=sys.stderr, flush=True)
    config.bos_token_id = meta.get("tokenizer.ggml.bos_token_id")
    config.eos_token_id = meta.get("tokenizer.ggml.eos_token_id")
    if "tokenizer.ggml.padding_token_id" in meta:
        config.pad_token_id = meta["tokenizer.ggml.padding_token_id"]
    config.save_pretrained(str(out))


def prepare_gguf_dir(gguf, out) -> Path:
    """Writes (or keeps) the directory `out` for GGUF file `gguf`; returns it."""
    gguf, out = Path(gguf).resolve(), Path(out).absolute()
    if not gguf.is_file():
        raise GgufPrepError(f"no GGUF file at {gguf}")
    if is_current(gguf, out):
        return out
    if out.exists() and _read_marker(out) is None:
        raise GgufPrepError(f"{out} exists and is not a fuselm GGUF directory; remove it or choose another")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        meta = read_gguf_metadata(gguf)
        write_config(gguf, meta, tmp)
        _write_tokenizer_and_generation(meta, tmp)
        os.symlink(gguf, tmp / "model.gguf")
        _write_json(tmp / MARKER, _stamp(gguf))
        _make_readable(tmp)
        _install(tmp, out, gguf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuselm_capture.gguf_dir", description=__doc__.splitlines()[0])
    p.add_argument("gguf", type=Path)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        print(prepare_gguf_dir(a.gguf, a.out))
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        print(f"fuselm: error: {a.gguf}: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
