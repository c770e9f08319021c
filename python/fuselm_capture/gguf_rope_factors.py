"""llama.cpp's RoPE frequency factors: a GGUF tensor transformers' loader never reads, applied.

llama.cpp's converter writes a RoPE scaling that differs per frequency as the tensor
`rope_freqs.weight`: rotary_dims / 2 factors, each dividing its frequency (ggml_rope_ext's
freq_factors; convert_hf_to_gguf's LlamaModel.generate_extra_tensors writes Llama 3.1's "llama3"
rope type so, EXAONE and Gemma 4 other scalings). transformers builds the model of a GGUF from
its metadata with the plain RoPE (its GGUF config mappings carry no such scaling) and never
reads the tensor, so the oracle and a loader that follows it run the model with frequencies it
was not trained with: a Llama 3.2 GGUF would run silently as another model.

The factors act where the model keeps its frequencies: a constant of the graph (a non-persistent
buffer capture recomputed, such as a rotary embedding's inv_freq) found by its values, the plain
inverse frequencies base^(-2i/n) for the file's rope.freq_base and rope.dimension_count n. Each
such constant is divided by the factors; one that already equals the divided frequencies (a
config that carries the scaling itself) is left as it is. With neither, the tensor is refused.
"""
from __future__ import annotations

import numpy as np
import torch

FACTORS_TENSOR = "rope_freqs.weight"  # llama.cpp's MODEL_TENSOR.ROPE_FREQS
_REL_TOL = 1e-5  # transformers computes the frequencies in float32


class RopeFactorsRefused(RuntimeError):
    """Factors the graph has no frequency constant for."""


def file_tensor(reader, name: str) -> np.ndarray | None:
    """The values of the file's tensor `name` as float64, flat; None when the file has none."""
    return next((np.asarray(t.data, dtype=np.float64).reshape(-1) for t in reader.tensors if t.name == name), None)


def _field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def plain_inverse_frequencies(reader) -> tuple[float, int, np.ndarray]:
    """(base, n, base^(-2i/n) for i < n/2 in float64) of the file's RoPE; n is rope.dimension_count,
    else the head size."""
    arch = _field(reader, "general.architecture")
    base = float(_field(reader, f"{arch}.rope.freq_base") or 10000.0)
    n = _field(reader, f"{arch}.rope.dimension_count")
    if n is None:
        n = int(_field(reader, f"{arch}.embedding_length")) // int(_field(reader, f"{arch}.attention.head_count"))
    return base, int(n), 1.0 / base ** (np.arange(0, int(n), 2, dtype=np.float64) / int(n))


def _matches(value: torch.Tensor, expected: np.ndarray) -> bool:
    got = value.detach().double().numpy()
    return got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= _REL_TOL * np.abs(expected)))


def apply_rope_factors(reader, constants: dict[str, torch.Tensor], used: set[str]) -> list[str]:
    """Divides each graph constant (name in `used`) that holds the file's plain inverse frequencies
    by the factors of `rope_freqs.weight`, in place in `constants`; returns the names changed.
    RopeFactorsRefused when no constant holds either the plain or the divided frequencies; [] for a
    file without the tensor."""
    factors = file_tensor(reader, FACTORS_TENSOR)
    if factors is None:
        return []
    base, n, plain = plain_inverse_frequencies(reader)
    if not np.all(np.isfinite(factors) & (factors > 0)):
        raise RopeFactorsRefused(f"tensor '{FACTORS_TENSOR}' holds factors that are not finite positive numbers")
    if factors.shape != plain.shape:
        raise RopeFactorsRefused(f"tensor '{FACTORS_TENSOR}' holds {factors.size} factors but the file's "
                                 f"RoPE has {plain.size} frequencies")
    changed, already = [], []
    for name in sorted(used):
        value = constants.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() != 1 or not value.is_floating_point():
            continue
        if _matches(value, plain / factors):
            already.append(name)
        elif _matches(value, plain):
            constants[name] = torch.from_numpy(plain / factors).to(value.dtype)
            changed.append(name)
    if not changed and not already:
        raise RopeFactorsRefused(
            f"tensor '{FACTORS_TENSOR}' scales the RoPE frequencies (each divided by its factor), "
            f"but no constant of the graph holds the file's frequencies (rope.freq_base {base:g} over {n} dims), so "
            f"it cannot be applied; refusing to run the model without it")
    return changed
