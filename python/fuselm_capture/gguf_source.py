"""A GGUF file as a model source for capture: its config and the GGUF tensor behind each parameter.

Both come from transformers' own GGUF support, so that no architecture is named here:
- the config: `load_gguf_checkpoint(path, return_tensors=False)` maps the GGUF metadata keys to an
  HF config (transformers' GGUF_CONFIG_MAPPING);
- the tensors: `get_gguf_hf_weights_map` maps GGUF tensor names (`blk.N.attn_q.weight`, ...) to
  the model's state-dict names through gguf's TensorNameMap, on a model built on the meta device,
  with the tensor processor transformers itself picks for the file (`transformers_processor`);
  what that processor does to each tensor's values is found by running it (gguf_transforms.py).

The C++ loader reads the tensors themselves (src/weights/gguf.h); see docs/gguf.md for the rest of
the plan (q/k rows, quantized weights, the processors' transforms).
"""
from __future__ import annotations

from .gguf_transforms import Transform, tensor_transform


class GgufSourceError(RuntimeError):
    pass


def gguf_config(gguf_path, notes: list[str] | None = None, reader=None):
    """The transformers config of a GGUF file (no weights read), with every architecture field of
    its metadata checked against it and the ones transformers' mapping drops put back
    (gguf_metadata.py, then the RoPE and head size: gguf_rope_config.py; a line per field in
    `notes`). GgufSourceError names a field the config cannot carry. `reader`: the file's
    GGUFReader when the caller has one."""
    from gguf import GGUFReader
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from .gguf_metadata import GgufMetadataRefused, checked_config
    from .gguf_rope_config import GgufRopeRefused, complete_head_size, complete_rope

    parsed = load_gguf_checkpoint(str(gguf_path), return_tensors=False)
    cfg = dict(parsed["config"])
    model_type = cfg.pop("model_type", None)
    if model_type is None:
        raise GgufSourceError(f"{gguf_path}: transformers found no architecture in the GGUF metadata")
    try:
        reader = reader or GGUFReader(str(gguf_path))
        config, changed = checked_config(reader, cfg, lambda kwargs: AutoConfig.for_model(model_type, **kwargs))
        changed += complete_head_size(config, reader) + complete_rope(config, reader)
    except (GgufMetadataRefused, GgufRopeRefused) as e:
        raise GgufSourceError(str(e)) from None  # the caller names the file
    if notes is not None:
        notes.extend(changed)
    return config


def transformers_processor(gguf_path, reader=None):
    """The tensor processor transformers uses for this file, built as load_gguf_checkpoint builds
    it (transformers/modeling_gguf_pytorch_utils.py): TENSOR_PROCESSORS keyed by the file's own
    `general.architecture` string (not the HF model_type: a gemma3 file has model_type
    gemma3_text), constructed with the config dict parsed from the metadata (not the model's
    config object, whose defaults the processor would otherwise see)."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, TensorProcessor, load_gguf_checkpoint,
                                                          read_field)

    architecture = read_field(reader or GGUFReader(str(gguf_path)), "general.architecture")[0]
    config = load_gguf_checkpoint(str(gguf_path), return_tensors=False).get("config", {})
    return TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config)


def gguf_tensor_plan(gguf_path, model, reader=None) -> dict[str, tuple[str, Transform]]:
    """Parameter name of `model` (built from gguf_config, on the meta device) -> (GGUF tensor name,
    what transformers' processor does to it). Tied parameters the file stores once (an LM head
    tied to the embedding) are absent; a parameter with no tensor, a tensor claimed twice, a shape
    other than the processor's output, or a transform fuselm cannot apply is an error naming it.
    `reader`: the file's GGUFReader when the caller has one (reading a large vocabulary takes seconds)."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    from .gguf_transforms import GgufTransformError

    reader = reader or GGUFReader(str(gguf_path))
    processor = transformers_processor(gguf_path, reader)
    gguf_to_hf = get_gguf_hf_weights_map(model, processor)
    params = dict(model.named_parameters(remove_duplicate=False))
    out: dict[str, tuple[str, Transform]] = {}
    for t in reader.tensors:
        file_shape = tuple(int(x) for x in reversed(t.shape))
        try:
            tr = tensor_transform(processor, t.name, file_shape, gguf_to_hf)
        except GgufTransformError as e:
            raise GgufSourceError(f"{gguf_path}: {e}") from None
        if tr.hf_name is None or tr.hf_name not in params:
            continue
        if tr.hf_name in out:
            raise GgufSourceError(f"{gguf_path}: parameter {tr.hf_name} maps to both {out[tr.hf_name][0]} and {t.name}")
        out[tr.hf_name] = (t.name, tr)
    tied = set()
    if getattr(model.config, "tie_word_embeddings", False):
        tied = {k for k in params if k not in dict(model.named_parameters())}
    _check_ties(gguf_path, model, out)
    for name, p in params.items():
        if name in out:
            tensor, tr = out[name]
            if list(p.shape) != list(tr.shape):
                how = f" after transformers' {tr.processor} ({tr.describe()})" if tr.changes_values else ""
                raise GgufSourceError(f"{gguf_path}: tensor {tensor} has shape {list(tr.shape)}{how} but parameter "
                                      f"{name} is {list(p.shape)}")
        elif name not in tied:
            raise GgufSourceError(f"{gguf_path}: no tensor holds parameter {name}")
    return out


def _check_ties(gguf_path, model, plan) -> None:
    """Parameters the model ties (one Parameter, e.g. the LM head and the embedding when the config
    says tie_word_embeddings) must not come from two different tensors: transformers then loads
    each as stored (a falcon file with output.weight: tied config, two tensors), while fuselm's
    graph has one tensor for both. Refused, naming both."""
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owner = first.setdefault(id(p), name)
        if owner != name and owner in plan and name in plan and plan[owner][0] != plan[name][0]:
            raise GgufSourceError(f"{gguf_path}: parameters {owner} and {name} are one tied tensor in the model the "
                                  f"config builds, but the file holds two, '{plan[owner][0]}' and '{plan[name][0]}', "
                                  f"which transformers loads apart; fuselm's graph has one tensor for both")


def gguf_parameter_map(gguf_path, model) -> dict[str, str]:
    """Parameter name of `model` -> GGUF tensor name (gguf_tensor_plan without the transforms)."""
    return {name: tensor for name, (tensor, _) in gguf_tensor_plan(gguf_path, model).items()}
