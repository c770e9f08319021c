"""fuselm's block dequantization and its q8_0 / q4_0 quantizers against the gguf package
(gguf.quants) on fresh random data: quant_oracle.py writes the cases and the package's answers
into a GGUF, and the C++ oracle tests (tests/cpp/kernels_quant_oracle_test.cc) check fuselm's code
against them, dequantized values bit for bit and quantized blocks byte for byte."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from quant_oracle import write_oracle

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", [101, 202, 303])
def test_blocks_match_gguf_quants(tmp_path: Path, seed: int) -> None:
    tests_bin = Path(os.environ.get("FUSELM_TESTS_BIN", REPO / "build" / "fuselm_tests"))
    assert tests_bin.exists(), f"{tests_bin} is missing: build first"
    oracle = tmp_path / "oracle.gguf"
    write_oracle(oracle, seed)
    proc = subprocess.run([str(tests_bin), "--gtest_filter=*QuantOracle*"], capture_output=True, text=True,
                          env={**os.environ, "FUSELM_QUANT_ORACLE": str(oracle)}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # 8 dequantization cases and 2 quantizer cases ran (none skipped or filtered away).
    assert "[  PASSED  ] 10 tests." in proc.stdout, proc.stdout[-2000:]
