"""The RoPE (and head size) a GGUF's metadata describes, completed in the config transformers builds.

transformers' GGUF config mappings (integrations/ggml.py) read few RoPE fields: `rope.freq_base`,
and for most architectures nothing of `rope.dimension_count` or `rope.scaling.*`. What they drop,
the model transformers builds lacks: a Phi-4-mini file (three quarters of each head rotated) came
out rotating whole heads, a Phi-3 128k file without its long factors; transformers itself then
runs such a file as another model. llama.cpp's converter writes these fields (convert_hf_to_gguf:
set_gguf_parameters, generate_extra_tensors) and llama.cpp applies them, so capture puts each back
where the config keeps it, as transformers' own config would have it:

- `rope.dimension_count` n against the config's rotated width (head_dim x partial_rotary_factor):
  where they differ, partial_rotary_factor = n / head_dim;
- `rope.scaling.type` linear or yarn with `rope.scaling.factor` (yarn: also
  `rope.scaling.original_context_length` and its beta fields): the rope_parameters of that type;
- the tensors `rope_factors_long.weight` and `rope_factors_short.weight` with
  `rope.scaling.original_context_length` (and `rope.scaling.attn_factor`): longrope, the factors
  read from the tensors (the engine then picks them by the context, as sequence_length.py says).

A config that keeps its RoPE per layer type (Gemma 3) gets the file's scaling on the layer types
whose base is the file's rope.freq_base, as llama.cpp scales only its non-SWA layers. A field it
cannot place (a scaling type it does not know, a yarn log multiplier, layer types the bases do not
tell apart, a config class without partial rotation) is refused naming it: running without it
would run another model. The tensors taken so are named by `consumed_tensors`, so that the check
that every tensor is read (gguf_capture) counts them.
"""
from __future__ import annotations

import math

import numpy as np

from .gguf_rope_factors import file_tensor

LONG, SHORT = "rope_factors_long.weight", "rope_factors_short.weight"  # llama.cpp's ROPE_FACTORS_LONG/SHORT

# The `{arch}.*` metadata fields placed here (gguf_metadata.py checks every other one; the bases,
# rope.freq_base and rope.freq_base_swa, are checked and placed there, before this runs).
FIELDS_READ = frozenset({
    "attention.key_length", "attention.value_length", "rope.dimension_count", "rope.scaling.type",
    "rope.scaling.factor", "rope.scaling.alpha", "rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_log_multiplier", "rope.scaling.original_context_length", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow"})


class GgufRopeRefused(RuntimeError):
    """RoPE metadata of a GGUF that the config cannot carry."""


def _field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _positive(key: str, value, integer: bool = False):
    """value as a finite positive number (int where integer), else GgufRopeRefused naming key."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (math.isfinite(number) and number > 0) or (integer and number != int(number)):
        raise GgufRopeRefused(f"{key} is {value!r}, not a positive {'integer' if integer else 'number'}")
    return int(number) if integer else number


def _int_field(reader, arch: str, key: str):
    value = _field(reader, f"{arch}.{key}")
    return None if value is None else _positive(key, value, integer=True)


def _factors(name: str, values):
    if values is not None and not np.all(np.isfinite(values) & (values > 0)):
        raise GgufRopeRefused(f"tensor '{name}' holds factors that are not finite positive numbers")
    return values


def _head_dim(text) -> int:
    return int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)


def _rotated_width(text, params: dict) -> int:
    factor = params.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)) or 1.0
    return int(_head_dim(text) * float(factor))


def _scaling(reader, arch: str, params: dict) -> dict | None:
    """rope_parameters for `rope.scaling.type` (None where the file has no scaling)."""
    kind = _field(reader, f"{arch}.rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = _field(reader, f"{arch}.rope.scaling.factor")
    if kind not in ("linear", "yarn") or factor is None:
        raise GgufRopeRefused(f"rope.scaling.type '{kind}'{'' if factor is not None else ' with no factor'} has no "
                              "transformers rope type fuselm maps it to")
    out = dict(params, rope_type=kind, factor=_positive("rope.scaling.factor", factor))
    for unplaced in ("alpha", "yarn_attn_factor"):
        value = _field(reader, f"{arch}.rope.scaling.{unplaced}")
        if value is not None and _positive(f"rope.scaling.{unplaced}", value) != 1.0:
            raise GgufRopeRefused(f"rope.scaling.{unplaced} {value} has no place in the config transformers builds")
    if kind == "yarn":
        if _field(reader, f"{arch}.rope.scaling.yarn_log_multiplier"):
            raise GgufRopeRefused("rope.scaling.yarn_log_multiplier (a yarn attention scale) has no place in the "
                                  "config transformers builds")
        orig = _int_field(reader, arch, "rope.scaling.original_context_length")
        if orig is not None:
            out["original_max_position_embeddings"] = orig
        for gguf_key, key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            value = _field(reader, f"{arch}.rope.scaling.{gguf_key}")
            if value is not None:
                out[key] = _positive(f"rope.scaling.{gguf_key}", value)
    return out


def _longrope(reader, arch: str, params: dict, width: int) -> dict | None:
    """longrope rope_parameters from the factor tensors (None where the file has none)."""
    long, short = _factors(LONG, file_tensor(reader, LONG)), _factors(SHORT, file_tensor(reader, SHORT))
    if long is None and short is None:
        return None
    orig = _int_field(reader, arch, "rope.scaling.original_context_length")
    if long is None or short is None or orig is None or long.size != short.size or 2 * long.size != width:
        raise GgufRopeRefused(f"tensors '{LONG}' and '{SHORT}' need each other, {width // 2} factors each and "
                              "rope.scaling.original_context_length")
    out = dict(params, rope_type="longrope", long_factor=[float(x) for x in long],
               short_factor=[float(x) for x in short], original_max_position_embeddings=int(orig))
    attn = _field(reader, f"{arch}.rope.scaling.attn_factor")
    if attn is not None:
        out["attention_factor"] = _positive("rope.scaling.attn_factor", attn)
    return out


def _per_layer_type(reader, arch: str, text, params: dict) -> list[str]:
    """A config keeping its RoPE per layer type (Gemma 3: sliding layers at one base, full ones at
    the file's rope.freq_base). llama.cpp scales only its non-SWA layers (llama_model::
    get_rope_freq_scale), whose base is that field: the file's scaling goes to the layer types of
    that base, which must be some but not all of them. The width must be each type's; longrope
    factors are refused."""
    n = _int_field(reader, arch, "rope.dimension_count")
    if n is not None and any(int(n) != _rotated_width(text, p) for p in params.values()):
        raise GgufRopeRefused(f"rope.dimension_count {n} is not the rotated width of every layer type of the config")
    if file_tensor(reader, LONG) is not None or file_tensor(reader, SHORT) is not None:
        raise GgufRopeRefused(f"tensors '{LONG}' and '{SHORT}' have no place in a config that keeps its RoPE per "
                              "layer type")
    kind = _field(reader, f"{arch}.rope.scaling.type")
    if kind in (None, "none"):
        return []
    base = _field(reader, f"{arch}.rope.freq_base")
    base = None if base is None else _positive("rope.freq_base", base)
    targets = [k for k, p in params.items() if base is not None and float(p.get("rope_theta", -1)) == base]
    if not targets or len(targets) == len(params):
        raise GgufRopeRefused(f"rope.scaling.type '{kind}': which of the config's layer types "
                              f"({', '.join(params)}) it scales cannot be told by their bases")
    changed = []
    for key in targets:
        if params[key].get("rope_type", "default") == "default":
            params[key] = _scaling(reader, arch, params[key])
            changed.append(f"RoPE scaling {kind} for the {key} layers")
    return changed


def _partial_rotation(text, params: dict, n) -> str | None:
    """Sets partial_rotary_factor in params where rope.dimension_count n says another width."""
    if n is None or int(n) == _rotated_width(text, params):
        return None
    if not hasattr(text, "partial_rotary_factor") and "partial_rotary_factor" not in params:
        raise GgufRopeRefused(f"rope.dimension_count {n} is not the head size {_head_dim(text)}, and "
                              f"{type(text).__name__} rotates whole heads")
    params["partial_rotary_factor"] = int(n) / _head_dim(text)
    return f"rope.dimension_count {n}: partial_rotary_factor {params['partial_rotary_factor']:g}"


def _store(text, params: dict) -> None:
    text.rope_parameters = params
    for key in ("partial_rotary_factor", "original_max_position_embeddings"):
        if key in params and hasattr(text, key):  # classes that keep them beside rope_parameters too
            setattr(text, key, params[key])


def complete_head_size(config, reader) -> list[str]:
    """`attention.key_length` as the config's head_dim where transformers' mapping leaves it out and
    the class keeps one (a Mistral-Nemo file is a llama file whose heads are narrower than
    hidden / heads); a `value_length` other than it is refused. Runs before complete_rope, whose
    rotated width is measured in heads of this size."""
    arch = _field(reader, "general.architecture")
    text = config.get_text_config()
    key, value = _int_field(reader, arch, "attention.key_length"), _int_field(reader, arch, "attention.value_length")
    if key is None or not hasattr(text, "num_attention_heads"):
        return []
    if value is not None and int(value) != int(key):
        raise GgufRopeRefused(f"attention.value_length {value} differs from attention.key_length {key}, which the "
                              f"config transformers builds cannot say")
    if int(key) == _head_dim(text):
        return []
    if not hasattr(text, "head_dim"):
        raise GgufRopeRefused(f"attention.key_length {key} is not hidden_size / heads ({_head_dim(text)}) and "
                              f"{type(text).__name__} has no head_dim")
    text.head_dim = int(key)
    return [f"attention.key_length {key}: head_dim {key}"]


def complete_rope(config, reader) -> list[str]:
    """Puts the file's RoPE fields the config lacks into it (in place); returns what changed, one
    line each. GgufRopeRefused names a field it cannot place."""
    arch = _field(reader, "general.architecture")
    text = config.get_text_config()
    params = dict(getattr(text, "rope_parameters", None) or {})
    if not params:  # no RoPE (transformers 5 gives every RoPE config its rope_parameters)
        return []
    if all(isinstance(v, dict) for v in params.values()):
        params = {k: dict(v) for k, v in params.items()}
        changed = _per_layer_type(reader, arch, text, params)
        if changed:
            text.rope_parameters = params
        return changed
    changed = [line for line in [_partial_rotation(text, params, _int_field(reader, arch, "rope.dimension_count"))]
               if line]
    if params.get("rope_type", "default") == "default":
        scaled = _longrope(reader, arch, params, _rotated_width(text, params)) or _scaling(reader, arch, params)
        if scaled is not None:
            params = scaled
            extra = f" ('{LONG}', '{SHORT}')" if params["rope_type"] == "longrope" else ""
            changed.append(f"RoPE scaling {params['rope_type']}{extra}")
    if changed:
        _store(text, params)
    return changed


def consumed_tensors(config, reader) -> set[str]:
    """The file's longrope factor tensors the config carries (same values), which no parameter reads."""
    params = getattr(config.get_text_config(), "rope_parameters", None) or {}
    long, short = file_tensor(reader, LONG), file_tensor(reader, SHORT)
    if long is None or short is None or params.get("rope_type") != "longrope":
        return set()
    same = all(np.allclose(np.asarray(params.get(k, []), dtype=np.float64), v, rtol=1e-6)
               for k, v in (("long_factor", long), ("short_factor", short)) if len(params.get(k, [])) == v.size)
    sized = len(params.get("long_factor", [])) == long.size and len(params.get("short_factor", [])) == short.size
    return {LONG, SHORT} if same and sized else set()
