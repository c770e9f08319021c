"""What transformers' GGUF tensor processor does to each tensor of a file, found by running it.

transformers reads a GGUF tensor (modeling_gguf_pytorch_utils.load_gguf_checkpoint) as
`processor.process(weights=dequantize(t), name=t.name, tensor_key_mapping=..., parsed_parameters=...)`,
the processor being `TENSOR_PROCESSORS.get(general.architecture, TensorProcessor)` built with the
config it parsed from the metadata. Rather than re-type each processor's logic, fuselm runs that
very processor on probe arrays of each tensor's shape and reads the transform off what comes back:
- the same (read-only, zero-memory) array back under the same name, nothing stored aside: none;
- else out = gather(in) + c, found exactly in float64: all-zeros give c, distinct index codes give
  the gather, a random probe checks both together. The gather must be one the C++ loader applies
  (docs/gguf.md): the identity up to a reshape, a permutation of whole dim-0 rows, a 2-D transpose;
- else out = f(in) elementwise for one f of ELEMENTWISE (llama.cpp's converters store some
  tensors through a function, e.g. Mamba's A as -exp(A_log), which transformers' processor
  inverts with log(-a)): each candidate is checked on a random probe of its domain;
- anything else (a function that is neither, a tensor merged with others into one parameter, or
  split into several) raises GgufTransformError naming the tensor and processor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class GgufTransformError(RuntimeError):
    pass


@dataclass(frozen=True)
class Transform:
    """out = reshape(transpose?(rows[row_order](file tensor))) + offset, as transformers reads it."""
    hf_name: str | None  # the state-dict name the processor's output goes to (None: transformers drops it)
    file_shape: tuple[int, ...]  # torch order, as dequantized
    shape: tuple[int, ...]  # torch shape of the processor's output
    row_order: tuple[int, ...] | None = None  # output row r = file row row_order[r]
    transpose: bool = False
    offset: float = 0.0
    processor: str = ""
    map: str | None = None  # a key of ELEMENTWISE applied to every element (no gather, no offset then)

    @property
    def changes_values(self) -> bool:
        return self.row_order is not None or self.transpose or self.offset != 0.0 or self.map is not None

    def describe(self) -> str:
        parts = []
        if self.row_order is not None:
            parts.append("permutes its rows")
        if self.transpose:
            parts.append("transposes it")
        if self.offset:
            parts.append(f"adds {self.offset:g}")
        if self.map:
            parts.append(f"maps every element through {self.map}")
        if self.shape != self.file_shape and not self.transpose:
            parts.append(f"reshapes {list(self.file_shape)} to {list(self.shape)}")
        return ", ".join(parts) or "nothing"


# Elementwise functions a processor may apply, by the name the IR records (the C++ loader applies
# the same, src/weights/gguf_transform.cc), each with a probe of its domain: (function, low, high).
ELEMENTWISE = {
    "log": (np.log, 0.05, 4.0),
    "log_neg": (lambda x: np.log(-x), -4.0, -0.05),
    "exp": (np.exp, -4.0, 4.0),
    "neg_exp": (lambda x: -np.exp(x), -4.0, 4.0),
}


def apply_map(name: str, x: np.ndarray) -> np.ndarray:
    """ELEMENTWISE[name] applied to x, as the loader applies it."""
    return ELEMENTWISE[name][0](x)


def _elementwise(processor, name: str, file_shape: tuple[int, ...], key_map: dict, what: str):
    """(hf name, map name) when the processor's output is f(input) for one f of ELEMENTWISE on
    random probes of its domain (shape kept), else None."""
    rng = np.random.default_rng(int(np.prod(file_shape, dtype=np.int64)) + 7)
    for key, (f, lo, hi) in ELEMENTWISE.items():
        probe = rng.uniform(lo, hi, file_shape)
        try:
            hf, out = _output(processor, probe, name, key_map, what)
        except GgufTransformError:  # a merge or split: not an elementwise function either
            raise
        except Exception:  # noqa: BLE001 - a probe outside what the processor accepts: not this map
            continue
        if out is not None and out.shape == probe.shape and np.allclose(out, f(probe), rtol=1e-12, atol=0):
            return hf, key
    return None


def _run(processor, probe, name: str, key_map: dict):
    """(name, output array or None, arrays stored aside by name) for one processor call."""
    stored: dict = {"tensors": {}}  # the parsed_parameters slot processors write merged tensors into
    with np.errstate(all="ignore"):
        r = processor.process(weights=probe, name=name, tensor_key_mapping=key_map, parsed_parameters=stored)
    aside = {k: np.asarray(v.detach().numpy() if hasattr(v, "detach") else v, dtype=np.float64)
             for k, v in stored["tensors"].items()}
    return r.name, r.weights, aside


def _output(processor, probe, name: str, key_map: dict, what: str):
    """(hf name, output) of one call, where the output is the processor's return or the one
    tensor it stored aside whole; a merge or split is refused."""
    out_name, weights, aside = _run(processor, probe, name, key_map)
    if out_name is not None and not aside:
        return key_map.get(out_name), np.asarray(weights, dtype=np.float64)
    if out_name is None and len(aside) == 1:
        (hf, value), = aside.items()
        if value.size == probe.size:
            return hf, value
        raise GgufTransformError(f"tensor '{name}': transformers' {what} merges it into parameter '{hf}' "
                                 f"({list(value.shape)}) with other tensors; fuselm does not apply that merge")
    if out_name is None and not aside:
        return None, None
    raise GgufTransformError(f"tensor '{name}': transformers' {what} splits it into {sorted(aside)}; "
                             f"fuselm does not apply that split")


def _gather(g: np.ndarray, file_shape: tuple[int, ...]) -> tuple[tuple[int, ...] | None, bool]:
    """(row order, transpose) for a gather g (output element -> flat file index) the loader can
    apply, or GgufTransformError's message as a ValueError."""
    n = int(np.prod(file_shape, dtype=np.int64))
    flat = g.reshape(-1)
    if np.array_equal(flat, np.arange(n)):
        return None, False
    if len(file_shape) >= 1 and g.shape == file_shape and file_shape[0] > 0:
        rows = g.reshape(file_shape[0], -1)
        width = rows.shape[1]
        start = rows[:, 0]
        if np.all(start % width == 0) and np.array_equal(rows, start[:, None] + np.arange(width)):
            order = start // width
            if np.array_equal(np.sort(order), np.arange(file_shape[0])):
                return tuple(int(x) for x in order), False
    if len(file_shape) == 2 and g.shape == file_shape[::-1]:
        if np.array_equal(g, np.arange(n).reshape(file_shape).T):
            return None, True
    raise ValueError("moves its elements in an order that is neither whole rows nor a 2-D transpose")


def tensor_transform(processor, name: str, file_shape: tuple[int, ...], key_map: dict) -> Transform:
    """The transform transformers' `processor` applies to GGUF tensor `name` of torch shape
    `file_shape` (see the module doc). Raises GgufTransformError naming the tensor and processor."""
    what = type(processor).__name__
    file_shape = tuple(int(x) for x in file_shape)
    cheap = np.broadcast_to(np.float32(0.5), file_shape)  # read-only, no memory: in-place edits raise
    try:
        out_name, weights, aside = _run(processor, cheap, name, key_map)
    except Exception as e:  # noqa: BLE001 - the processor refused a probe: say which
        raise GgufTransformError(f"tensor '{name}': transformers' {what} failed on a probe of its shape "
                                 f"({type(e).__name__}: {e}); fuselm cannot tell what it does to it") from e
    if weights is cheap and out_name == name and not aside:
        return Transform(key_map.get(name), file_shape, file_shape, processor=what)

    try:
        return _gather_plus_constant(processor, name, file_shape, key_map, what)
    except GgufTransformError as not_gather:
        found = _elementwise(processor, name, file_shape, key_map, what)
        if found is None:
            raise not_gather from None
        return Transform(found[0], file_shape, file_shape, processor=what, map=found[1])


def _gather_plus_constant(processor, name: str, file_shape: tuple[int, ...], key_map: dict, what: str) -> Transform:
    """The transform when the processor's output is gather(input) + c (see the module doc), else
    GgufTransformError."""
    n = int(np.prod(file_shape, dtype=np.int64))
    hf, zeros = _output(processor, np.zeros(file_shape), name, key_map, what)
    if hf is None and zeros is None:
        return Transform(None, file_shape, file_shape, processor=what)
    _, index = _output(processor, np.arange(n, dtype=np.float64).reshape(file_shape), name, key_map, what)
    rng = np.random.default_rng(n)
    rand = rng.standard_normal(file_shape)
    _, checked = _output(processor, rand, name, key_map, what)
    fail = f"tensor '{name}': transformers' {what} "
    if zeros.size != n or index.shape != zeros.shape or checked.shape != zeros.shape:
        raise GgufTransformError(fail + f"turns {list(file_shape)} into {list(zeros.shape)} elements of other count")
    offset = float(zeros.reshape(-1)[0]) if n else 0.0
    with np.errstate(all="ignore"):  # a non-finite offset (log(0)) is refused just below
        g = index - offset
    if not (np.all(zeros == offset) and np.isfinite(offset) and np.all(g == np.round(g))
            and np.all((g >= 0) & (g < n))):
        raise GgufTransformError(fail + "changes its values by something other than a gather plus a constant "
                                        "or one elementwise function fuselm knows; fuselm cannot apply it")
    g = g.astype(np.int64)
    if not np.array_equal(checked, rand.reshape(-1)[g] + offset):
        raise GgufTransformError(fail + "changes its values by something other than a gather plus a constant "
                                        "or one elementwise function fuselm knows; fuselm cannot apply it")
    try:
        order, transpose = _gather(g, file_shape)
    except ValueError as e:
        raise GgufTransformError(fail + f"{e}; fuselm cannot apply it") from None
    return Transform(hf, file_shape, tuple(int(x) for x in zeros.shape), order, transpose,
                     0.0 if offset == 0 else offset, what)
