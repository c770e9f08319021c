"""A GGUF file as a model source for capture: its config and the GGUF tensor behind each parameter.

Both come from transformers' own GGUF support, so that no architecture is named here:
- the config: `load_gguf_checkpoint(path, return_tensors=False)` maps the GGUF metadata keys to an
  HF config (transformers' GGUF_CONFIG_MAPPING);
- the tensors: `get_gguf_hf_weights_map` maps GGUF tensor names (`blk.N.attn_q.weight`, ...) to
  the model's state-dict names through gguf's TensorNameMap, on a model built on the meta device.

The C++ loader reads the tensors themselves (src/weights/gguf.h); see docs/gguf.md for the rest of
the plan (q/k rows, quantized weights).
"""
from __future__ import annotations


class GgufSourceError(RuntimeError):
    pass


def gguf_config(gguf_path):
    """The transformers config of a GGUF file (no weights read)."""
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    parsed = load_gguf_checkpoint(str(gguf_path), return_tensors=False)
    cfg = dict(parsed["config"])
    model_type = cfg.pop("model_type", None)
    if model_type is None:
        raise GgufSourceError(f"{gguf_path}: transformers found no architecture in the GGUF metadata")
    return AutoConfig.for_model(model_type, **cfg)


def gguf_parameter_map(gguf_path, model) -> dict[str, str]:
    """Parameter name of `model` (built from gguf_config, on the meta device) -> GGUF tensor name.

    Tied parameters that the file stores once (an LM head tied to the embedding) are absent; a
    parameter with no tensor, or a tensor claimed twice, is an error naming it."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    arch = model.config.model_type
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=model.config.to_dict())
    gguf_to_hf = get_gguf_hf_weights_map(model, processor)
    in_file = {t.name: t for t in GGUFReader(str(gguf_path)).tensors}
    out: dict[str, str] = {}
    for gguf_name, hf_name in gguf_to_hf.items():
        if gguf_name not in in_file:
            continue
        if hf_name in out:
            raise GgufSourceError(f"{gguf_path}: parameter {hf_name} maps to both {out[hf_name]} and {gguf_name}")
        out[hf_name] = gguf_name
    tied = set()
    if getattr(model.config, "tie_word_embeddings", False):
        tied = {k for k in dict(model.named_parameters(remove_duplicate=False)) if k not in dict(model.named_parameters())}
    for name, p in model.named_parameters(remove_duplicate=False):
        if name in out:
            shape = [int(x) for x in reversed(in_file[out[name]].shape)]
            if list(p.shape) != shape:
                raise GgufSourceError(f"{gguf_path}: tensor {out[name]} has shape {shape} but parameter {name} "
                                      f"is {list(p.shape)}")
        elif name not in tied:
            raise GgufSourceError(f"{gguf_path}: no tensor holds parameter {name}")
    return out
