"""Writes the GGUF files that tests/cpp/weights_gguf_test.cc reads (tests/cpp/data/gguf/).

Each <name>.gguf is written by the `gguf` package's GGUFWriter; <name>.json beside it is what the
package's own GGUFReader reads back from that file (the oracle of the C++ reader): every metadata
key with its value type(s) and value, every tensor's name, ggml type, ne (ggml order), absolute data
offset, byte count, byte sum and first bytes. Tensors cover plain types, the quantized types the
package can write (Q8_0, Q4_0, Q4_1 via gguf.quants.quantize) and K-quant blocks of random bytes.
Regenerate after changing this script: .venv/bin/python tests/python/make_gguf_fixtures.py
"""
from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "cpp" / "data" / "gguf"
Q = gguf.GGMLQuantizationType


def metadata(w: gguf.GGUFWriter) -> None:
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo\ttab")
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.25])
    w.add_array("test.strings", ["a", "", "ccc"])
    w.add_key_value("test.nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.ARRAY)


def tensors(w: gguf.GGUFWriter, rng: np.random.Generator) -> None:
    w.add_tensor("plain.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("plain.f16", rng.standard_normal((7,)).astype(np.float16))
    w.add_tensor("plain.3d", rng.standard_normal((2, 3, 4)).astype(np.float32))
    for q in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        x = rng.standard_normal((4, 64)).astype(np.float32)
        w.add_tensor(f"quant.{q.name.lower()}", gguf.quants.quantize(x, q), raw_dtype=q)
    for q in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        _, type_size = gguf.GGML_QUANT_SIZES[q]
        raw = rng.integers(0, 256, size=(2, type_size), dtype=np.uint8)
        w.add_tensor(f"quant.{q.name.lower()}", raw, raw_dtype=q)


def field_json(f: gguf.ReaderField):
    def contents(field):
        v = field.contents()
        return v.tolist() if isinstance(v, np.ndarray) else v
    return {"types": [t.name for t in f.types], "value": contents(f)}


# The block types whose row 0 the expectations include (dequantized by gguf.quants).
ROW0_TYPES = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K)


def expected(path: Path) -> dict:
    r = gguf.GGUFReader(path)
    meta = {k: field_json(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    ts = []
    for t in r.tensors:
        raw = np.asarray(t.data).view(np.uint8).reshape(-1)
        entry = {"name": t.name, "type": int(t.tensor_type), "ne": [int(x) for x in t.shape],
                 "data_offset": int(t.data_offset), "n_bytes": int(t.n_bytes),
                 "byte_sum": int(raw.astype(np.uint64).sum()), "head": raw[:8].tolist()}
        if t.tensor_type in ROW0_TYPES:
            _, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
            block_elems = gguf.GGML_QUANT_SIZES[t.tensor_type][0]
            row = raw[: int(t.shape[0]) // block_elems * type_size].reshape(1, -1)
            entry["row0"] = gguf.quants.dequantize(row, t.tensor_type).reshape(-1)[:64].tolist()
        ts.append(entry)
    return {"alignment": int(r.alignment), "metadata": meta, "key_order": list(meta), "tensors": ts}


def write(name: str, alignment: int | None, seed: int) -> None:
    path = OUT / f"{name}.gguf"
    w = gguf.GGUFWriter(path, arch="testarch")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    metadata(w)
    tensors(w, np.random.default_rng(seed))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (OUT / f"{name}.json").write_text(json.dumps(expected(path), indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write("basic", None, 0)
    write("align64", 64, 1)


if __name__ == "__main__":
    main()
