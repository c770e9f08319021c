"""A forward that reads its sequence length as the largest position: captured at the model's context.

transformers' length-dependent RoPE types pick their frequencies by the length of the sequence they
are called on, `torch.max(position_ids) + 1` (modeling_rope_utils.dynamic_rope_update; Phi-MoE's
rotary embedding does the same by hand): longrope (Phi-3, Phi-3.5, Phi-4-mini) switches from its
short to its long factors past original_max_position_embeddings, dynamic NTK grows its base past
max_position_embeddings. That is a branch on a value of the input: torch.export cannot trace it for
every length, and an engine that caches rotated keys cannot follow it per step either (a key
rotated with the short factors would keep them once its sequence crossed the threshold). vLLM
(Phi3LongRoPEScaledRotaryEmbedding, DynamicNTKScalingRotaryEmbedding) and llama.cpp
(llama_model::get_rope_factors) fix the choice once, by the longest sequence they serve; so does
capture: the whole-tensor max of the position input reads as `context - 1`, context being the one
the model is captured for (its max_position_embeddings, or the smaller context the engine serves:
`--max-context N` captures such a model again at N, as vLLM decides by max_model_len and llama.cpp
by -c). What the update computes from it becomes constants of the graph; the IR directory says
what was read (sequence_length.json), so that the engine knows to capture again.

Consequences, said where the model is captured (a notice) and in docs/ir.md: a longrope model whose
context exceeds its original one runs its long factors at every length, as vLLM does by default
and llama.cpp at that context; transformers, run without a cache, uses the short ones below the
threshold. Dynamic NTK acts only past max_position_embeddings, which the engine never reaches, so it
runs as transformers does at every length it serves.
"""
from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import torch

# Ops whose result holds the same values as their first argument (a view, a copy, a cast), so its
# largest element is still the largest position.
_SAME_VALUES = frozenset({
    "view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as", "contiguous", "clone", "to", "float",
    "double", "long", "int", "type_as", "flatten", "detach",
})
# The whole-tensor largest element, as models write it.
_WHOLE_MAX = frozenset({"max", "amax"})


def _name(func) -> str:
    return getattr(func, "__name__", "")


class _PinnedLength(torch.overrides.TorchFunctionMode):
    """Reads the whole-tensor max of the position input (and of what only reshapes or casts it) as
    context - 1; records the modules that read it."""

    def __init__(self, context: int, names: dict[int, str]):
        super().__init__()
        self.context = context
        self.names = names
        self.positions: set[int] = set()  # ids of tensors that hold the position input's values
        self._held: list[torch.Tensor] = []  # those tensors, alive, so that no other tensor reuses an id
        self.readers: list[str] = []  # modules whose forward read the pinned length
        self.stack: list[torch.nn.Module] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        first = args[0] if args else None
        tracked = isinstance(first, torch.Tensor) and id(first) in self.positions
        if tracked and name in _WHOLE_MAX and len(args) == 1 and not kwargs:
            self._note_reader()
            return torch.tensor(self.context - 1, dtype=first.dtype)
        out = func(*args, **kwargs)
        if tracked and name in _SAME_VALUES and isinstance(out, torch.Tensor):
            self.track(out)
        return out

    def track(self, t: torch.Tensor) -> None:
        self.positions.add(id(t))
        self._held.append(t)

    def _note_reader(self) -> None:
        global last_read
        module = self.stack[-1] if self.stack else None
        where = f"{self.names.get(id(module)) or '<root>'} ({type(module).__name__})" if module is not None \
            else "<root>"
        if where not in self.readers:
            self.readers.append(where)
        last_read = {"context": self.context, "readers": list(self.readers)}


# The context the engine will serve when smaller than the model's (`fuselm ... --max-context N`,
# passed to capture as --context N), and what the last export read: {"context", "readers"}.
served_context: int | None = None
last_read: dict | None = None


def model_context(module: torch.nn.Module) -> int | None:
    """The context a causal LM is captured for: its text config's max_position_embeddings, or the
    served context where that is smaller (None where it has none, or for a module with no config)."""
    config = getattr(module, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    if not (isinstance(value, int) and value > 0):
        return None
    return min(value, served_context) if served_context else value


def write_last_read(ir_dir) -> None:
    """ir_dir/sequence_length.json: what the last export read ({"context", "readers"}), for the
    engine to capture again for a smaller served context; removed when it read nothing."""
    path = Path(ir_dir) / "sequence_length.json"
    path.unlink(missing_ok=True)
    if last_read:
        path.write_text(json.dumps(last_read) + "\n")


@contextlib.contextmanager
def pinned_sequence_length(module: torch.nn.Module):
    """Within: module's forward (called with a position input among its keyword arguments, as capture
    exports it) sees the whole-tensor max of its positions as context - 1, context being its text
    config's max_position_embeddings. Yields the mode, whose `readers` lists the modules that read
    it, or None for a module with no context length (no pin: a branch on the positions fails export
    as before)."""
    context = model_context(module)
    if context is None:
        yield None
        return
    from torch.nn.modules import module as nn_module

    from .capture import POSITION_INPUTS
    mode = _PinnedLength(int(context), {id(m): n for n, m in module.named_modules()})

    def root_inputs(mod, args, kwargs):
        for key in POSITION_INPUTS:
            value = kwargs.get(key)
            if isinstance(value, torch.Tensor):
                mode.track(value)

    def push(mod, args):
        mode.stack.append(mod)

    def pop(mod, args, out):
        if mode.stack and mode.stack[-1] is mod:
            mode.stack.pop()

    handles = [module.register_forward_pre_hook(root_inputs, with_kwargs=True),
               nn_module.register_module_forward_pre_hook(push), nn_module.register_module_forward_hook(pop)]
    try:
        with mode, warnings.catch_warnings():
            # longrope keeps its long frequencies as a plain attribute, which export warns of.
            warnings.filterwarnings("ignore", message="The tensor attribute .* was assigned during export")
            yield mode
    finally:
        for h in handles:
            h.remove()
