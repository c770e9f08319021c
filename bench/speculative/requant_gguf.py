"""Writes a copy of a GGUF whose Q4_1 tensors are quantized again as Q4_0 (through f32, with
gguf-py's reference quantizer), every other tensor and all metadata kept: a Q4_0 file of the same
model, with its embedding/output tensors at the precision the source file gave them (as llama.cpp's
Q4_0 files keep token_embd/output at Q8_0 or Q6_K). Usage: requant_gguf.py SRC.gguf DST.gguf"""
from __future__ import annotations

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType, quants


def copy_metadata(reader: GGUFReader, writer: GGUFWriter) -> None:
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(field.name, value)
        elif vtype == GGUFValueType.STRING:
            writer.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], vtype)


def main(src: str, dst: str) -> None:
    reader = GGUFReader(src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = GGUFWriter(dst, arch)
    copy_metadata(reader, writer)
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order
        if t.tensor_type == GGMLQuantizationType.Q4_1:
            f32 = quants.dequantize(t.data, t.tensor_type).reshape(shape)
            data = quants.quantize(f32, GGMLQuantizationType.Q4_0)
            writer.add_tensor(t.name, data, raw_dtype=GGMLQuantizationType.Q4_0)
        else:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape if t.tensor_type in (0, 1, 30) else None,
                              raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
