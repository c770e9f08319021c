"""Capture of a directory gguf_dir.py prepared: each parameter's checkpoint entry names its GGUF tensor.

An entry is {"keys": [tensor], "converter": null, "file": "model.gguf", "dtype": ggml type name,
"shape": torch shape, "rows": null | {"unpermute_heads": H} | {"order": [file row of each row]}}, and
where transformers' processor changes the tensor "offset", "transpose", "file_shape", "processor".
{"unpermute_heads": H} undoes llama.cpp's q/k permutation and is decided by structure, never by a
model's name (docs/gguf.md):
- the file's side: ggml's rope type for the file's `general.architecture` (a table of the GGUF
  format, ROPE_NORM_ARCHS below): "normal" (interleaved pairs) ropes have their q/k rows permuted
  by llama.cpp's converter;
- the graph's side: a linear whose output, through shape-only ops, is cut in two halves along its
  last dim with the second half negated (transformers' rotate_half) rotates halves. Its head count
  is the linear's width over that last dim.
Only where both hold are the rows unpermuted, and transformers' own processor for the file must
agree (it reorders exactly those rows the same way), else capture refuses. Every other transform
transformers' processor applies on reading (gguf_transforms.py: offsets, row orders, transposes,
reshapes) is recorded in the entry for the loader; one it cannot express is refused.
"""
from __future__ import annotations

from pathlib import Path

# ggml's LLAMA_ROPE_TYPE_NORM architectures (llama.cpp src/llama-model.cpp, llama_model_rope_type):
# their GGUF q/k rows are stored for interleaved rope.
ROPE_NORM_ARCHS = {
    "llama", "llama4", "deci", "baichuan", "internlm2", "minicpm", "xverse", "command-r", "cohere2",
    "olmo", "arctic", "deepseek", "deepseek2", "plm", "chatglm", "granite", "granitemoe", "chameleon",
    "bitnet", "solar", "exaone4",
}

_SHAPE_ONLY = {"view", "reshape", "_unsafe_view", "transpose", "permute", "contiguous", "clone", "alias",
               "unsqueeze", "to", "_to_copy"}


class GgufCaptureError(RuntimeError):
    pass


def _op(node) -> str:
    t = node.target
    return getattr(t, "__name__", str(t)).split(".")[0] if node.op == "call_function" else ""


def _last_dim(node) -> int | None:
    val = node.meta.get("val")
    return int(val.shape[-1]) if val is not None and len(val.shape) and isinstance(val.shape[-1], int) else None


def _rotates_halves(node, depth=0) -> int | None:
    """Head size d when node's value (through shape-only ops) is cut at d/2 along the last dim and
    the upper half negated (rotate_half); else None."""
    if depth > 8:
        return None
    d = _last_dim(node)
    for user in node.users:
        op = _op(user)
        if op in _SHAPE_ONLY:
            found = _rotates_halves(user, depth + 1)
            if found:
                return found
        elif op == "slice" and d and d % 2 == 0:
            args = list(user.args) + [None] * 4
            dim, start = args[1], args[2]
            if dim in (-1, len(user.meta["val"].shape) - 1) and start == d // 2 and \
                    any(_op(u) == "neg" for u in user.users):
                return d
    return None


def rotate_half_heads(ep) -> dict[str, int]:
    """Parameter target -> head count for the linear weights whose outputs rotate halves."""
    to_target = dict(ep.graph_signature.inputs_to_parameters)
    out = {}
    for node in ep.graph.nodes:
        if _op(node) != "linear" or len(node.args) < 2 or node.args[1].name not in to_target:
            continue
        d = _rotates_halves(node)
        width = _last_dim(node)
        if d and width and width % d == 0:
            out[to_target[node.args[1].name]] = width // d
    return out


def _unpermute_order(rows: int, n_head: int) -> tuple[int, ...] | None:
    """llama.cpp's q/k row permutation undone (src/weights/gguf_tensor.cc rope_unpermute_rows):
    HF row r is file row result[r]; None when rows are not whole heads of pairs."""
    if n_head <= 0 or rows % (2 * n_head):
        return None
    half = rows // n_head // 2
    return tuple(h * 2 * half + 2 * d + two for h in range(n_head) for two in range(2) for d in range(half))


def _rows_entry(gguf: Path, target: str, tensor: str, tr, heads: int | None):
    """The entry's "rows": transformers' row order, cross-checked with the structural rule."""
    expected = _unpermute_order(tr.file_shape[0], heads) if heads else None
    if heads and tr.row_order != expected:
        did = "reads its rows as stored" if tr.row_order is None else "reorders its rows otherwise"
        raise GgufCaptureError(f"{gguf}: tensor '{tensor}' ({target}): the file's rope is ggml's interleaved one and "
                               f"the graph rotates halves of {heads} heads, so llama.cpp permuted its rows, but "
                               f"transformers' {tr.processor} {did}; refusing to guess")
    if tr.row_order is None:
        return None
    if heads:
        return {"unpermute_heads": heads}
    return {"order": list(tr.row_order)}


def _check_every_tensor_read(gguf: Path, reader, plan: dict, ep, constants: dict, model_config) -> list[str]:
    """Every tensor of the file is a parameter's, longrope factors the config carries
    (gguf_rope_config.py), or llama.cpp's RoPE factors applied to the graph's frequencies
    (gguf_rope_factors.py); returns lines for the capture's progress. A tensor the model
    transformers builds from the metadata has no place for is part of the model llama.cpp runs:
    running without it would be another model, so it is refused, naming it."""
    from .gguf_rope_config import consumed_tensors
    from .gguf_rope_factors import FACTORS_TENSOR, RopeFactorsRefused, apply_rope_factors
    read = {tensor for tensor, _ in plan.values()} | consumed_tensors(model_config, reader)
    unread = [t.name for t in reader.tensors if t.name not in read]
    notes = []
    if FACTORS_TENSOR in unread:
        used = {s.target for s in ep.graph_signature.input_specs if s.target in constants}
        try:
            changed = apply_rope_factors(reader, constants, used)
        except RopeFactorsRefused as e:
            raise GgufCaptureError(str(e)) from None
        unread.remove(FACTORS_TENSOR)
        notes.append(f"'{FACTORS_TENSOR}' divides the RoPE frequencies of {', '.join(changed) or 'none'} "
                     f"(the GGUF's frequency factors; the config already carried them where none)")
    if unread:
        more = f" and {len(unread) - 4} more" if len(unread) > 4 else ""
        raise GgufCaptureError(f"tensors {', '.join(repr(n) for n in unread[:4])}{more} belong to no parameter of "
                               f"the model transformers builds from the file's metadata; the engines GGUF is made for read "
                               f"them, so the model would run without part of itself (refused)")
    return notes


def gguf_entries(model_dir: Path, model, ep, constants: dict) -> tuple[dict[str, dict], list[str]]:
    """Parameter target -> its checkpoint entry, for every parameter the file holds. Each entry
    carries what transformers' tensor processor does to the tensor (gguf_transforms.py), as data
    the C++ loader applies: "rows" (a row order), "transpose", "offset" (added to every element),
    "map" (an elementwise function of gguf_transforms.ELEMENTWISE), "file_shape" (when the processor reshapes or transposes); "processor" names it for messages.
    Also returns progress lines; constants (name -> value of the graph's constants) may change
    (_check_every_tensor_read)."""
    from gguf import GGUFReader

    from .gguf_source import gguf_tensor_plan

    gguf = model_dir / "model.gguf"
    reader = GGUFReader(str(gguf))
    arch = reader.fields["general.architecture"].contents()
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    plan = gguf_tensor_plan(gguf, model, reader)
    notes = _check_every_tensor_read(gguf, reader, plan, ep, constants, model.config)
    heads = rotate_half_heads(ep) if arch in ROPE_NORM_ARCHS else {}
    shapes = {k: list(p.shape) for k, p in model.named_parameters(remove_duplicate=False)}
    out = {}
    for target, (tensor, tr) in plan.items():
        entry = {"keys": [tensor], "converter": None, "file": "model.gguf", "dtype": types[tensor],
                 "shape": shapes[target], "rows": _rows_entry(gguf, target, tensor, tr, heads.get(target))}
        if tr.transpose:
            entry["transpose"] = True
        if tr.offset:
            entry["offset"] = tr.offset
        if tr.map:
            entry["map"] = tr.map
        if list(tr.file_shape) != shapes[target]:
            entry["file_shape"] = list(tr.file_shape)
        if tr.changes_values:
            entry["processor"] = tr.processor
        out[target] = entry
    return out, notes
