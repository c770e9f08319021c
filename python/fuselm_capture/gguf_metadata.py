"""Every architecture field of a GGUF's metadata checked against the config capture builds from it.

transformers' GGUF config mappings (integrations/ggml.py) read a subset of the fields llama.cpp's
converter writes (convert_hf_to_gguf: TextModel.set_gguf_parameters and each model's own), and the
config fills what they skip with its class defaults. Where a default differs from the file,
transformers, and capture with it, build another model: a StarCoder2 file's `rope.freq_base` is
not mapped (the model ran at the class's 1e4, not the file's 1e6); nor are a Gemma 2 file's logit
soft-caps, a Gemma 3 file's sliding-layer base, or a Mamba file's `ssm.dt_b_c_rms` (RMS norms on
dt, B and C: FalconMamba, which the converter writes as a mamba file). Each `{arch}.KEY` field is
therefore checked, whether the mapping read it or not:

- a field with a config counterpart (`FIELDS`: the transformers attribute names that hold it,
  the first the config has wins) must equal it; where it differs, the file's value is placed (the
  config is built again from the mapped fields plus the placed ones, as transformers builds it,
  and read back) and a line says so;
- a field the config has no counterpart for is accepted only where it cannot change the output:
  a shape (the tensor plan refuses any tensor of another shape), an informational field, or the
  value that means "nothing" (`neutral`: a scale of 1, no sliding window, no norm); else refused;
- a field `FIELDS` does not know is refused: what it changes cannot be told.

The RoPE and head-size fields are gguf_rope_config's (its FIELDS_READ), placed after these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field

import numpy as np

from .gguf_rope_config import FIELDS_READ as ROPE_FIELDS


class GgufMetadataRefused(RuntimeError):
    """A GGUF metadata field the config capture builds cannot carry or be shown to agree with."""


# Pseudo-attributes: the RoPE base of the full-attention layers (or of every layer) and of the
# sliding-window layers, inside the config's rope_parameters.
THETA_FULL, THETA_SLIDING = "rope_parameters.rope_theta", "rope_parameters[sliding_attention].rope_theta"
SAME_AS_HEADS = "attention.head_count"  # neutral of head_count_kv: every head its own K/V


@dataclass(frozen=True)
class Field:
    """How one GGUF field is checked. `attrs`: the transformers config attributes that hold it;
    `shape`: the tensors' shapes prove it where the config has none of attrs (and a 0, llama.cpp's
    "no such part", is accepted); `neutral`: the value that changes nothing where the config has
    none of attrs; `zero_is_none`: 0 in the file is None in the config (no window, no cap);
    `info`: read by nothing that computes; `enum`: the file's integer -> the config's value."""
    attrs: tuple[str, ...] = ()
    shape: bool = False
    neutral: object = None
    zero_is_none: bool = False
    info: bool = False
    enum: dict = dc_field(default_factory=dict)


_EPS = ("rms_norm_eps", "norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_epsilon")

# The field names are llama.cpp's (gguf-py constants Keys.LLM, Keys.Attention, Keys.Rope, Keys.SSM).
FIELDS: dict[str, Field] = {
    "block_count": Field(("num_hidden_layers", "n_layer", "num_layers"), shape=True),
    "context_length": Field(("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"), info=True),
    "embedding_length": Field(("hidden_size", "n_embd", "d_model"), shape=True),
    "feed_forward_length": Field(("intermediate_size", "n_inner", "ffn_hidden_size", "d_ff"), shape=True),
    "vocab_size": Field(("vocab_size",), shape=True),
    "attention.head_count": Field(("num_attention_heads", "n_head", "num_heads"), neutral=0),
    "attention.head_count_kv": Field(("num_key_value_heads", "n_head_kv", "num_kv_heads"), neutral=SAME_AS_HEADS),
    "attention.layer_norm_rms_epsilon": Field(_EPS),
    "attention.layer_norm_epsilon": Field(_EPS[2:] + _EPS[:2]),
    "attention.sliding_window": Field(("sliding_window",), zero_is_none=True, neutral=0),
    "sliding_window": Field(("sliding_window",), zero_is_none=True, neutral=0),  # gpt-oss files' spelling
    "attention.causal": Field((), neutral=True),
    "attention.clamp_kqv": Field(("clip_qkv",), zero_is_none=True, neutral=0),
    "attention.scale": Field(("attention_multiplier",)),
    "attention.q_lora_rank": Field(("q_lora_rank",), shape=True),
    "attention.kv_lora_rank": Field(("kv_lora_rank",), shape=True),
    "attn_logit_softcapping": Field(("attn_logit_softcapping",), zero_is_none=True, neutral=0),
    "final_logit_softcapping": Field(("final_logit_softcapping",), zero_is_none=True, neutral=0),
    "router_logit_softcapping": Field(("router_logit_softcapping",), zero_is_none=True, neutral=0),
    "expert_count": Field(("num_local_experts", "num_experts", "n_routed_experts"), neutral=0),
    "expert_used_count": Field(("num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_topk"),
                               neutral=0),
    "expert_feed_forward_length": Field(("moe_intermediate_size", "expert_intermediate_size"), shape=True),
    "expert_shared_feed_forward_length": Field(("shared_expert_intermediate_size",), shape=True),
    "expert_shared_count": Field(("n_shared_experts", "num_shared_experts"), neutral=0),
    "expert_weights_scale": Field(("routed_scaling_factor",), neutral=1.0),
    "expert_weights_norm": Field(("norm_topk_prob",)),
    "expert_gating_func": Field(("scoring_func", "score_function", "score_func"),
                                enum={1: "softmax", 2: "sigmoid", 3: "sqrtsoftplus"}),
    "expert_group_count": Field(("n_group",), neutral=1),
    "expert_group_used_count": Field(("topk_group",), neutral=1),
    "leading_dense_block_count": Field(("first_k_dense_replace",), neutral=0),
    "logit_scale": Field(("logit_scale", "logits_scaling"), neutral=1.0),
    "embedding_scale": Field(("embedding_multiplier",), neutral=1.0),
    "residual_scale": Field(("residual_multiplier",), neutral=1.0),
    "use_parallel_residual": Field(("use_parallel_residual", "parallel_attn"), neutral=False),
    "rope.freq_base": Field((THETA_FULL,)),
    "rope.freq_base_swa": Field((THETA_SLIDING,)),
    "rope.scaling.finetuned": Field(info=True),
    "rope.scale_linear": Field(neutral=1.0),  # the 2023 spelling of a linear scaling factor
    # How the converter's source stored q/k: llama.cpp writes the same tensors either way for it;
    # "jploski" (a Falcon q|k|v row order transformers does not undo) is refused.
    "tensor_data_layout": Field(neutral="Meta AI original pth"),
    "rope.scaling.yarn_ext_factor": Field(neutral=1.0),  # transformers' yarn has no extrapolation factor
    "ssm.conv_kernel": Field(("conv_kernel", "d_conv"), shape=True),
    "ssm.inner_size": Field(("intermediate_size", "d_inner"), shape=True),
    "ssm.state_size": Field(("state_size", "d_state"), shape=True),
    "ssm.time_step_rank": Field(("time_step_rank", "dt_rank"), shape=True),
    "ssm.group_count": Field(("n_groups",)),
    "ssm.dt_b_c_rms": Field(neutral=False),
    "shortconv.l_cache": Field(("conv_L_cache",), shape=True),
    "decoder_start_token_id": Field(("decoder_start_token_id",), info=True),
}

_ABSENT = object()


def _rope_entry(text, sliding: bool):
    params = getattr(text, "rope_parameters", None) or {}
    if not params:
        return None
    if not all(isinstance(v, dict) for v in params.values()):
        return None if sliding else params
    name = "sliding_attention" if sliding else "full_attention"
    if name not in params and not sliding and len(params) == 1:
        name = next(iter(params))
    return params.get(name)


def _read(text, attr: str):
    """The config's value of attr (a pseudo-attribute for the RoPE bases), or _ABSENT."""
    if attr in (THETA_FULL, THETA_SLIDING):
        entry = _rope_entry(text, attr == THETA_SLIDING)
        return _ABSENT if entry is None or "rope_theta" not in entry else entry["rope_theta"]
    return getattr(text, attr, _ABSENT)


def _scalar(value):
    """A GGUF field's contents as a Python scalar; an array whose entries are all equal as that
    entry; any other array as a tuple."""
    if isinstance(value, (list, tuple, np.ndarray)):
        items = [v.item() if hasattr(v, "item") else v for v in value]
        return items[0] if items and all(v == items[0] for v in items) else tuple(items)
    return value.item() if hasattr(value, "item") else value


def _same(file_value, config_value, spec: Field) -> bool:
    if spec.zero_is_none and file_value == 0:
        return config_value in (None, 0)
    if spec.enum:
        return spec.enum.get(file_value, object()) == config_value
    if isinstance(config_value, (list, tuple)):
        return tuple(config_value) == file_value or (len(set(config_value)) == 1 and config_value[0] == file_value)
    if isinstance(file_value, bool) or isinstance(config_value, bool):
        return isinstance(config_value, (bool, int)) and bool(file_value) == bool(config_value)
    if isinstance(file_value, (int, float)) and isinstance(config_value, (int, float)):
        return math.isclose(float(file_value), float(config_value), rel_tol=1e-5)  # the file holds float32
    return file_value == config_value


def _placeable(key: str, value, spec: Field) -> None:
    """A value put into the config must be one the field can hold: a finite number not below 0
    (an integer for shapes), a bool, or a string the field's enum knows."""
    if spec.enum:
        ok = value in spec.enum
    elif isinstance(value, bool):
        ok = True
    elif isinstance(value, (int, float)):
        ok = math.isfinite(value) and value >= 0 and (not spec.shape or float(value).is_integer())
    else:
        ok = False
    if not ok:
        raise GgufMetadataRefused(f"metadata field {key} = {value!r} is not a value the config can hold")


def _config_value(file_value, spec: Field):
    return spec.enum.get(file_value, file_value) if spec.enum else file_value


@dataclass
class _Plan:
    overrides: dict = dc_field(default_factory=dict)  # attribute -> value, built into the config
    thetas: dict = dc_field(default_factory=dict)  # THETA_* -> value, set in rope_parameters
    notes: list = dc_field(default_factory=list)


def _rule(key: str, value) -> Field:
    spec = FIELDS.get(key)
    if spec is None:
        raise GgufMetadataRefused(f"metadata field {key} = {value!r}: fuselm cannot tell what it changes in the "
                                  f"model, so the file is refused rather than run as another model")
    if isinstance(value, tuple) and not spec.shape:
        raise GgufMetadataRefused(f"metadata field {key} holds per-layer values {list(value)[:8]}, which the "
                                  f"config transformers builds does not carry")
    return spec


def _without_attribute(key: str, value, spec: Field, text, fields: dict) -> None:
    """A field the config has no attribute for: accepted where it cannot change the output."""
    neutral = fields.get(spec.neutral) if spec.neutral == SAME_AS_HEADS else spec.neutral
    if spec.info or (spec.shape and not isinstance(value, str)) or _same(value, neutral, Field()):
        return
    raise GgufMetadataRefused(f"metadata field {key} = {value!r}: the {type(text).__name__} transformers builds "
                              f"has no field for it, and running without it would run another model")


def _check(key: str, value, text, fields: dict, plan: _Plan) -> None:
    """One `{arch}.KEY` field against the config `text`: accepted, planned for placing, or refused."""
    spec = _rule(key, value)
    attr = next((a for a in spec.attrs if _read(text, a) is not _ABSENT), None)
    if attr is None:
        return _without_attribute(key, value, spec, text, fields)
    if spec.shape and value == 0 or isinstance(value, tuple) or _same(value, _read(text, attr), spec):
        return None
    _placeable(key, value, spec)
    placed = _config_value(value, spec)
    if attr in (THETA_FULL, THETA_SLIDING):
        plan.thetas[attr] = float(placed)
    else:
        plan.overrides[attr] = None if spec.zero_is_none and value == 0 else placed
    plan.notes.append(f"{key} {value!r}: {attr} {placed!r} (the config's default was {_read(text, attr)!r})")
    return None


def _set_thetas(text, thetas: dict) -> None:
    if not thetas:
        return
    params = {k: (dict(v) if isinstance(v, dict) else v) for k, v in (text.rope_parameters or {}).items()}
    text.rope_parameters = params
    for attr, value in thetas.items():
        _rope_entry(text, attr == THETA_SLIDING)["rope_theta"] = value


def checked_config(reader, mapped: dict, build):
    """The config `build(mapped)` makes (mapped: the fields transformers' GGUF mapping read, as
    config kwargs), with every `{arch}.*` metadata field of the file (a gguf GGUFReader) checked
    and, where the config disagrees, placed: returns (config, one line per placed field).
    GgufMetadataRefused names a field that cannot be placed or shown harmless."""
    arch = reader.fields["general.architecture"].contents()
    fields = {k[len(arch) + 1:]: _scalar(f.contents()) for k, f in reader.fields.items() if k.startswith(arch + ".")}
    fields = {k: v for k, v in fields.items() if k not in ROPE_FIELDS}
    config = build(mapped)
    plan = _Plan()
    for key, value in fields.items():
        _check(key, value, config.get_text_config(), fields, plan)
    if plan.overrides:
        try:
            config = build({**mapped, **plan.overrides})
        except Exception as e:  # noqa: BLE001 - transformers' config validation, any kind: one line
            raise GgufMetadataRefused(f"the config transformers builds refuses the file's {sorted(plan.overrides)}: "
                                      f"{' '.join(str(e).split())[:300]}") from None
        for attr, want in plan.overrides.items():
            got = _read(config.get_text_config(), attr)
            if not _same(want, got, Field()) and not (want is None and got is None):
                raise GgufMetadataRefused(f"{attr} {want!r} from the file's metadata does not hold in the "
                                          f"{type(config).__name__} transformers builds (it reads back {got!r})")
    _set_thetas(config.get_text_config(), plan.thetas)
    return config, plan.notes
