"""Writes a GGUF of quantization cases with the `gguf` package's answers (gguf.quants), which
tests/cpp/kernels_quant_oracle_test.cc checks fuselm's block code against.

For each type T of q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, q5_0, q5_1 the file holds
  T.blocks   rows of random blocks: written by gguf.quants.quantize where the package can
             (q8_0, q4_0, q4_1, q5_0, q5_1; random inputs with a few all-zero and single-spike blocks), random
             bytes otherwise (with the f16 scales drawn finite so that values are finite)
  T.dequant  f32 gguf.quants.dequantize(T.blocks)
and for q8_0 and q4_0 (our quantizers)
  T.input    f32 inputs (with ties and zero blocks)
  T.quant    gguf.quants.quantize(T.input) (ggml's reference quantizer, byte for byte).
The committed copy (tests/cpp/data/quant/oracle.gguf, seed 0) is regenerated with
.venv/bin/python tests/python/quant_oracle.py; test_gguf_quants.py writes fresh ones.
"""
from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
TYPES = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K,
         "q5_0": Q.Q5_0, "q5_1": Q.Q5_1}
QUANTIZABLE = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
# Byte offsets of the f16 scales inside each block (ggml-common.h).
SCALE_OFFSETS = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}
ROWS, BLOCKS_PER_ROW = 6, 4
DEFAULT = Path(__file__).resolve().parents[1] / "cpp" / "data" / "quant" / "oracle.gguf"


def inputs(rng: np.random.Generator, cols: int) -> np.ndarray:
    x = rng.standard_normal((ROWS, cols)).astype(np.float32) * rng.uniform(0.01, 3, (ROWS, 1)).astype(np.float32)
    x[0, :32] = 0                         # an all-zero block
    x[1, 32:64] = 0
    x[1, 40] = -2.5                        # a single spike
    x[2, :32] = np.arange(32, dtype=np.float32) - 16  # exact multiples: ties of the rounding
    return x


def random_blocks(rng: np.random.Generator, name: str, qtype: Q) -> np.ndarray:
    block_elems, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(ROWS * BLOCKS_PER_ROW, type_size), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        scale = rng.uniform(-0.05, 0.05, raw.shape[0]).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
    return raw.reshape(ROWS, BLOCKS_PER_ROW * type_size)


def write_oracle(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch="quant_oracle")
    for name, qtype in TYPES.items():
        block_elems, _ = gguf.GGML_QUANT_SIZES[qtype]
        cols = BLOCKS_PER_ROW * block_elems
        if name in QUANTIZABLE:
            blocks = gguf.quants.quantize(inputs(rng, cols), qtype)
        else:
            blocks = random_blocks(rng, name, qtype)
        w.add_tensor(f"{name}.blocks", blocks, raw_dtype=qtype)
        w.add_tensor(f"{name}.dequant", gguf.quants.dequantize(blocks, qtype).astype(np.float32))
        if name in ("q8_0", "q4_0"):
            x = inputs(rng, cols)
            w.add_tensor(f"{name}.input", x)
            w.add_tensor(f"{name}.quant", gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    out.parent.mkdir(parents=True, exist_ok=True)
    write_oracle(out, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
