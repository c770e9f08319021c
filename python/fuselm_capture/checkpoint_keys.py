"""Map each model parameter to the checkpoint tensor(s) that hold its bytes.

transformers renames and merges checkpoint keys while loading (conversion_mapping.py:
WeightRenaming, WeightConverter); capture replays that mapping with transformers' own
rename_source_key so the engine can read the checkpoint directly. Keys are read from the
safetensors headers only.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path


def safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return sorted({model_dir / f for f in weight_map.values()})
    return sorted(model_dir.glob("*.safetensors"))


def read_header(path: Path) -> dict:
    """The JSON header of one safetensors file ({key: {dtype, shape, data_offsets}})."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: truncated safetensors header")
        (n,) = struct.unpack("<Q", raw)
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def checkpoint_tensors(model_dir: Path) -> dict[str, dict]:
    """key -> {file, dtype, shape} over every shard of the model directory."""
    out = {}
    for path in safetensors_files(model_dir):
        for key, info in read_header(path).items():
            out[key] = {"file": path.name, "dtype": info["dtype"], "shape": info["shape"]}
    return out


def _conversions(model):
    """(renamings, converters, rename_source_key, stack_of, chunk_of) of the model's transformers
    conversion mapping; stack_of: matched source pattern -> (part index, parts, operations);
    chunk_of: source pattern of a Chunk converter -> (target patterns, dim). A plain nn.Module or
    an older transformers: nothing to replay (names are the checkpoint keys)."""
    stack_of: dict[str, tuple] = {}
    chunk_of: dict[str, tuple] = {}
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
        transforms = get_model_conversion_mapping(model)
    except Exception:  # noqa: BLE001
        return [], [], None, stack_of, chunk_of
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    for conv in converters:
        for i, pattern in enumerate(conv.source_patterns):
            stack_of[pattern] = (i, len(conv.source_patterns), list(getattr(conv, "operations", [])))
        chunk = _chunk_split(conv)
        if chunk is not None:
            chunk_of.update({pattern: chunk for pattern in conv.source_patterns})
    return renamings, converters, rename_source_key, stack_of, chunk_of


def _add_chunks(found: dict, wanted: set, key: str, first_target: str, chunk: tuple) -> None:
    """One checkpoint tensor holding several parameters: each wanted one reads its chunk of `key`."""
    targets, dim = chunk
    for index, part in enumerate(_chunk_targets(first_target, targets)):
        if part in wanted:
            found[part] = {"keys": [key], "converter": None,
                           "chunk": {"index": index, "count": len(targets), "dim": dim}}


def resolve(model, model_keys: list[str], ckpt: dict[str, dict]) -> dict[str, dict]:
    """model key -> {"keys": [checkpoint keys], "converter": str|None} for every key found; a
    parameter read from part of a packed tensor also has "chunk" {index, count, dim}."""
    renamings, converters, rename_source_key, stack_of, chunk_of = _conversions(model)
    wanted = set(model_keys)
    meta_state_dict = {k: None for k in model_keys}
    prefix = getattr(model, "base_model_prefix", None)
    found: dict[str, dict] = {}
    for key in sorted(ckpt):
        if key in wanted:
            target, converter = key, None
        elif rename_source_key is not None:
            target, converter = rename_source_key(key, renamings, converters, prefix, meta_state_dict)
        else:
            continue
        if converter in chunk_of:
            _add_chunks(found, wanted, key, target, chunk_of[converter])
            continue
        if target not in wanted:
            continue
        entry = found.setdefault(target, {"keys": [], "converter": None})
        entry["keys"].append(key)
        if converter is not None:
            entry["converter"] = str(converter)
            entry.setdefault("_parts", []).append((key, converter))
    for entry in found.values():
        parts = entry.pop("_parts", None)
        if parts:
            stack = _expert_stack(parts, stack_of)
            if stack is not None:
                entry["keys"], entry["stack"] = stack
    return found


def _chunk_split(conv):
    """(target patterns, dim) of a converter that splits one checkpoint tensor into its targets
    (transformers' Chunk(dim=d) alone: a packed gate/q/k/v weight read as separate parameters),
    else None."""
    ops = list(getattr(conv, "operations", []))
    targets = list(getattr(conv, "target_patterns", []))
    if len(conv.source_patterns) != 1 or len(targets) < 2 or [type(o).__name__ for o in ops] != ["Chunk"]:
        return None
    return targets, int(getattr(ops[0], "dim", 0))


def _chunk_targets(first: str, targets: list[str]) -> list[str]:
    """Every target of a Chunk converter from the one rename_source_key returns (the first
    pattern's), by putting each target pattern in its place."""
    if targets[0] not in first:
        return [first]
    return [first.replace(targets[0], t) for t in targets]


def _expert_stack(parts: list[tuple[str, str]], stack_of: dict[str, tuple]):
    """(keys ordered expert-major, {"experts", "parts", "concat_dim"}) for a per-expert merge.

    Supported: transformers' MergeModulelist(dim=0) optionally followed by Concatenate(dim=d), the
    conversion that stacks per-expert checkpoint tensors (experts.N.gate_proj / up_proj) into one
    [E, ...] parameter; and Concatenate(dim=d) alone over named parts (a short convolution's q, k
    and v weights merged into one), written with "experts": 0 (no expert axis). Anything else
    returns None, and the engine rejects the converter by name.
    """
    import re
    plain = _concatenation(parts, stack_of)
    if plain is not None:
        return plain
    ops = None
    slots: dict[tuple[int, int], str] = {}
    for key, pattern in parts:
        if pattern not in stack_of or "*" not in pattern:
            return None
        part, n_parts, ops = stack_of[pattern]
        m = re.search(pattern.replace("*", r"(\d+)"), key)
        if m is None:
            return None
        slots[(int(m.group(1)), part)] = key
    names = [type(o).__name__ for o in ops]
    if names == ["MergeModulelist"] and getattr(ops[0], "dim", 0) == 0:
        concat_dim = None
    elif names == ["MergeModulelist", "Concatenate"] and getattr(ops[0], "dim", 0) == 0:
        concat_dim = int(getattr(ops[1], "dim"))
    else:
        return None
    experts = 1 + max(e for e, _ in slots)
    if len(slots) != experts * n_parts or (concat_dim is None and n_parts != 1):
        return None
    keys = [slots[(e, p)] for e in range(experts) for p in range(n_parts)]
    return keys, {"experts": experts, "parts": n_parts, "concat_dim": concat_dim}


def _concatenation(parts: list[tuple[str, str]], stack_of: dict[str, tuple]):
    """(keys in part order, {"experts": 0, "parts": P, "concat_dim": d}) when every part comes from
    a source pattern without a wildcard of one Concatenate(dim=d) converter, each part once; else None."""
    order: dict[int, str] = {}
    n_parts, dim = 0, None
    for key, pattern in parts:
        if pattern not in stack_of or "*" in pattern:
            return None
        part, n_parts, ops = stack_of[pattern]
        if [type(o).__name__ for o in ops] != ["Concatenate"] or part in order:
            return None
        dim = int(getattr(ops[0], "dim", 0))
        order[part] = key
    if sorted(order) != list(range(n_parts)):
        return None
    return [order[p] for p in range(n_parts)], {"experts": 0, "parts": n_parts, "concat_dim": dim}


def unread_modules(model, unread: set[str], all_keys: list[str], found: dict[str, dict]) -> list[dict]:
    """The checkpoint tensors of model parameters the graph never reads, grouped by module.

    unread: model keys (parameters, persistent buffers) no graph node reads; all_keys: every
    model key; found: resolve()'s map. A multimodal wrapper run on token ids alone never reads its
    vision or audio tower or projector: each such tensor is listed under the outermost module
    whose every parameter is unread, so the engine reports the group once and does not take it for
    layers missing from the graph. Tensors that map to no model parameter are not listed (the
    engine's unused-tensor check judges those). Returns [{"module", "class", "checkpoint_prefix",
    "keys"}] in module order; "checkpoint_prefix" is the dotted prefix every key shares ("" if none).
    """
    read_prefixes = set()
    for key in all_keys:
        if key not in unread:
            parts = key.split(".")
            read_prefixes.update(".".join(parts[:i]) for i in range(len(parts)))
    modules = dict(model.named_modules())
    groups: dict[str, list[str]] = {}
    for key in all_keys:
        if key not in unread or key not in found:
            continue
        parts = key.split(".")
        # The shortest module path above the key that no read key lies under.
        owner = next((".".join(parts[:i]) for i in range(1, len(parts))
                      if ".".join(parts[:i]) not in read_prefixes), key)
        groups.setdefault(owner, []).extend(found[key]["keys"])
    out = []
    for owner, keys in groups.items():
        keys = sorted(set(keys))
        mod = modules.get(owner)
        out.append({"module": owner, "class": type(mod).__name__ if mod is not None else None,
                    "checkpoint_prefix": _common_prefix(keys), "keys": keys})
    return out


def _common_prefix(keys: list[str]) -> str:
    """The dotted path components every key starts with, ending in a dot ("visual."), or ""."""
    first = keys[0].split(".")[:-1]
    n = len(first)
    for key in keys[1:]:
        parts = key.split(".")
        n = next((i for i in range(min(n, len(parts) - 1)) if parts[i] != first[i]), min(n, len(parts) - 1))
    return ".".join(first[:n]) + "." if n else ""
