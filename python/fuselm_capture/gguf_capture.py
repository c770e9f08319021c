"""Capture of a directory gguf_dir.py prepared: each parameter's checkpoint entry names its GGUF tensor.

An entry is {"keys": [tensor], "converter": null, "file": "model.gguf", "dtype": ggml type name,
"shape": torch shape, "rows": null | {"unpermute_heads": H}}. "rows" undoes llama.cpp's q/k
permutation and is decided by structure, never by a model's name (docs/gguf.md):
- the file's side: ggml's rope type for the file's `general.architecture` (a table of the GGUF
  format, ROPE_NORM_ARCHS below): "normal" (interleaved pairs) ropes have their q/k rows permuted
  by llama.cpp's converter;
- the graph's side: a linear whose output, through shape-only ops, is cut in two halves along its
  last dim with the second half negated (transformers' rotate_half) rotates halves. Its head count
  is the linear's width over that last dim.
Only where both hold are the rows unpermuted. Architectures whose transformers GGUF loader changes
tensor values in other ways (TENSOR_PROCESSORS other than the plain and the llama one) are refused.
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


def gguf_entries(model_dir: Path, model, ep) -> dict[str, dict]:
    """Parameter target -> its checkpoint entry, for every parameter the file holds."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor, TENSOR_PROCESSORS, TensorProcessor

    from .gguf_source import gguf_parameter_map

    gguf = model_dir / "model.gguf"
    reader = GGUFReader(str(gguf))
    arch = reader.fields["general.architecture"].contents()
    processor = TENSOR_PROCESSORS.get(model.config.model_type, TensorProcessor)
    if processor not in (TensorProcessor, LlamaTensorProcessor):
        raise GgufCaptureError(f"{gguf}: transformers changes the tensors of {model.config.model_type} GGUF files "
                               f"({processor.__name__}); fuselm reads GGUF tensors only as they are or with "
                               f"their q/k rows unpermuted")
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    mapping = gguf_parameter_map(gguf, model)
    heads = rotate_half_heads(ep) if arch in ROPE_NORM_ARCHS else {}
    shapes = {k: list(p.shape) for k, p in model.named_parameters(remove_duplicate=False)}
    out = {}
    for target, tensor in mapping.items():
        rows = {"unpermute_heads": heads[target]} if target in heads else None
        out[target] = {"keys": [tensor], "converter": None, "file": "model.gguf", "dtype": types[tensor],
                       "shape": shapes[target], "rows": rows}
    return out
