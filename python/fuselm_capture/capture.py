"""Capture: export a model with torch.export and write fuselm's IR next to it.

Models are built with parameters on the meta device (meta_init.py), attention and experts routed
to the opaque fuselm ops (ops.py), then exported non-strict with a dynamic token count, use_cache
off and no decompositions, so the graph keeps high-level ATen ops (aten.linear, aten.silu, ...);
only ops the engine lacks are then decomposed (decompose.py).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from . import checkpoint_keys, key_bias, key_selection, messages, ops
from .ir_writer import Writer, dtype_name
from .meta_init import constants_on_cpu, parameters_on_meta

IR_DIR_NAME = "fuselm-ir"
# The graph inputs that carry the tokens' absolute positions (forward_inputs passes one of them).
POSITION_INPUTS = ("position_ids", "cache_position")


class CaptureError(RuntimeError):
    """A model that cannot be captured; the message names the model class, module and reason."""


class RecurrenceRefused(CaptureError):
    """A recurrence capture cannot replace: a dispatch point's call the fuselm op cannot express, or
    a forward that specialises the token count. Final: no other attention implementation helps."""


def _progress(msg: str) -> None:
    print(f"fuselm capture: {msg}", file=sys.stderr, flush=True)


def _first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, with its type."""
    first = messages.reason(str(e))
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _innermost_module(exc: BaseException, names: dict[int, str]) -> torch.nn.Module | None:
    """The deepest nn.Module whose forward was on the stack when export failed."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        obj = tb.tb_frame.f_locals.get("self")
        if isinstance(obj, torch.nn.Module) and id(obj) in names:
            found = obj
        tb = tb.tb_next
    return found


def _export(module: torch.nn.Module, kwargs: dict, dynamic_shapes: dict) -> torch.export.ExportedProgram:
    """torch.export.export, non-strict, with the recurrent dispatch points substituted."""
    from .dispatch import recurrent_dispatch
    from .sequence_length import pinned_sequence_length
    with torch.no_grad(), recurrent_dispatch(module), pinned_sequence_length(module), _quiet_export():
        return torch.export.export(module, (), kwargs, dynamic_shapes=dynamic_shapes, strict=False)


@contextlib.contextmanager
def _quiet_export():
    """torch.export prints the partial graph of a failed trace to stderr (a data-dependent guard:
    pages of `def forward(...)`, at each nesting level); capture reports the failure in one line,
    so that graph is dropped from what export wrote, and the rest passes on once export returns."""
    buf, real = io.StringIO(), sys.stderr
    try:
        with contextlib.redirect_stderr(buf):
            yield
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        real.write(buf.getvalue().replace(f"{graph}\n", "") if graph else buf.getvalue())
        raise
    real.write(buf.getvalue())


def export_module(module: torch.nn.Module, kwargs: dict, dynamic_shapes: dict,
                  decompose: bool = True, values: dict | None = None) -> torch.export.ExportedProgram:
    """torch.export in fuselm's configuration; failures become CaptureError naming the module.
    decompose=False leaves ops the engine lacks in place (the caller rewrites them first, then
    calls decompose_for_engine). values: buffer name -> value for the probes of linear attention
    written inline (linear_attn_by_hand.py); by default the module's buffers that are not on meta."""
    from .dispatch import DispatchRefused, number_states, recurrent_dispatch
    from .length_watch import watch_length
    from .range_guards import drop_proved_guards
    from .sequence_length import pinned_sequence_length
    names = {id(m): n for n, m in module.named_modules()}
    try:
        with torch.no_grad(), recurrent_dispatch(module), watch_length(module) as length, drop_proved_guards(), \
                constants_on_cpu(), pinned_sequence_length(module) as pinned, _quiet_export():
            ep = torch.export.export(module, (), kwargs, dynamic_shapes=dynamic_shapes, strict=False)
        if pinned is not None and pinned.readers:
            _progress(f"{', '.join(pinned.readers)} reads the sequence length as its largest position (a RoPE "
                      f"that depends on the length): captured at the context, {pinned.context} tokens, the "
                      f"choice serving engines fix once (docs/ir.md)")
    except DispatchRefused as e:
        raise RecurrenceRefused(f"{type(module).__name__}: {e}") from e
    except Exception as e:  # noqa: BLE001 - every torch failure is reported the same way
        inner = _innermost_module(e, names)
        where = f"{names[id(inner)] or '<root>'} ({type(inner).__name__})" if inner is not None else "<unknown module>"
        reason = messages.reason(str(e)) or type(e).__name__
        # An experts-shaped module that transformers does not route through ExpertsInterface and
        # the structural rule (ops.identify_experts) did not take: say why it did not.
        not_experts = getattr(inner, "_fuselm_not_experts", None)
        hint = (f" (not captured as an experts op: {type(inner).__name__} is not routed through ExpertsInterface "
                f"and {not_experts})") if not_experts else ""
        if "Constraints violated" in str(e):
            if length.describe():
                # torch names no module for a specialised token count (it checks the guards after
                # tracing); the watch saw which module's forward added the guard.
                where = length.describe()
                hint = (": a recurrence written inline, or another length-specialised forward, with no kernel "
                        "dispatch point that fuselm replaces")
            ep = _linear_attention(module, kwargs, dynamic_shapes, values, e,
                                   f"torch.export failed for {type(module).__name__} in module {where}: "
                                   f"{type(e).__name__}: {reason}{hint}")
        else:
            raise CaptureError(
                f"torch.export failed for {type(module).__name__} in module {where}: {type(e).__name__}: {reason}{hint}"
            ) from e
    number_states(ep)
    try:
        folded = key_bias.fold_key_bias(ep)
    except key_bias.KeyBiasRefused as e:
        raise CaptureError(f"{type(module).__name__}: {e}") from e
    if folded:
        _progress(f"{len(folded)} attention calls take a mask the model builds as a per-key bias under its mask "
                  f"({folded[0]}, ...): folded into one more key column (docs/ir.md)")
    try:
        # The context up to which sparse attention's key selection is every key (None: no such op).
        dense_context = key_selection.prove_dense(ep)
    except key_selection.KeySelectionRefused as e:
        raise CaptureError(f"{type(module).__name__}: {e}") from e
    ep = decompose_for_engine(ep, module) if decompose else ep
    ep.fuselm_dense_context = dense_context
    return ep


def _linear_attention(module, kwargs, dynamic_shapes, values, first: Exception, refusal: str):
    """The export of a length-specialised module whose specialising forwards are linear attention
    written inline, rewritten (linear_attn_by_hand.py); CaptureError (refusal, and why it is not
    that) otherwise."""
    from . import linear_attn_by_hand
    if values is None:
        values = {n: b for n, b in module.named_buffers() if b.device.type != "meta"}
    try:
        ep, report = linear_attn_by_hand.capture(module, kwargs, dynamic_shapes, values, _export)
    except linear_attn_by_hand.NotLinearAttention as e:
        return _recurrence(module, kwargs, dynamic_shapes, first,
                           f"{refusal} (not linear attention: {messages.reason(str(e))}")
    except Exception as e:  # noqa: BLE001 - the bounded exports failed: the first failure stands
        return _recurrence(module, kwargs, dynamic_shapes, first, f"{refusal} (not linear attention: {_first_line(e)}")
    for line in report:
        _progress(f"linear attention written by hand: {line}")
    return ep


def _recurrence(module, kwargs, dynamic_shapes, first: Exception, refusal: str):
    """The export of a length-specialised module whose token loops are recurrences written inline
    (recurrence_by_hand.py); CaptureError (refusal, which ends with why it is not that) otherwise.
    refusal is left open for that reason."""
    from . import recurrence_by_hand
    try:
        ep, report = recurrence_by_hand.capture(module, kwargs, dynamic_shapes, _export)
    except recurrence_by_hand.NotRecurrence as e:
        raise CaptureError(f"{refusal}; not a recurrence fuselm runs: {messages.reason(str(e))})") from first
    except Exception as e:  # noqa: BLE001 - the fixed-length exports failed: the first failure stands
        raise CaptureError(f"{refusal}; not a recurrence fuselm runs: {_first_line(e)})") from first
    for line in report:
        _progress(f"recurrence written by hand: {line}")
    return ep


def decompose_for_engine(ep: torch.export.ExportedProgram, module: torch.nn.Module) -> torch.export.ExportedProgram:
    """Ops the engine lacks become ops it has (decompose.py), or capture stops naming them; then
    the ops fusers anchor on take one form (canonical.py)."""
    from .canonical import canonical_forms
    from .decompose import UnsupportedOpError, decompose_missing
    from .ir_writer import DROPPED_OPS
    try:
        ep = decompose_missing(ep, set(DROPPED_OPS))
    except UnsupportedOpError as e:
        raise CaptureError(f"{type(module).__name__}: {e}") from e
    canonical_forms(ep)
    return ep


def check_step_positions(ep: torch.export.ExportedProgram, module: torch.nn.Module) -> None:
    """Float data the graph computes from arange(T) (step_positions.py) reads the position input
    instead (position_ids or cache_position), or CaptureError names the op that cannot."""
    from .step_positions import StepPositionsRefused, substitute_step_positions
    positions = next((n for n in ep.graph.nodes if n.op == "placeholder" and n.name in POSITION_INPUTS), None)
    try:
        done = substitute_step_positions(ep.graph, positions)
    except StepPositionsRefused as e:
        raise CaptureError(f"{type(module).__name__}: {e}") from e
    if done:
        ep.graph_module.recompile()
    for line in done:
        _progress(f"positions counted from 0 read from {positions.name}: {line}")


def _non_persistent_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for mod_name, mod in module.named_modules():
        for b in getattr(mod, "_non_persistent_buffers_set", ()):
            t = mod._buffers.get(b)
            if t is not None:
                out[f"{mod_name}.{b}" if mod_name else b] = t.detach().clone()
    return out


def _write(ep, module, out_dir: Path, params: dict, constants: dict[str, torch.Tensor],
           input_names: dict[str, str], extra: dict) -> Path:
    from safetensors.torch import save_file

    modules = dict(module.named_modules())
    ops.number_attention_calls(ep)  # every path's graph (dispatched or by hand): KV layers in graph order
    ir = Writer(ep, modules).write(params, input_names)
    # Lifted constant tensors (torch.tensor(...) inside forward) travel with the buffers.
    # Non-persistent buffers are in ep.constants too, but as meta tensors: keep the CPU values.
    for name, value in ep.constants.items():
        if isinstance(value, torch.Tensor) and name not in constants and value.device.type != "meta":
            constants[name] = value.detach().clone()
    used = {n["target"] for n in ir["nodes"] if n["op"] == "placeholder" and n["kind"] == "constant"}
    missing = used - constants.keys()
    if missing:
        raise CaptureError(f"constants {sorted(missing)} were not recomputed on the CPU")
    ir["constants"] = {
        k: {"dtype": dtype_name(constants[k].dtype), "shape": list(constants[k].shape)} for k in sorted(used)
    }
    ir.update(extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Each file is written to a temporary of this process's own and renamed into place (atomic):
    # a crash never leaves a half-written file, and two captures at once never share a temporary.
    # The constants go first, so an ir.json that is in place always finds its constants.
    _write_atomic(out_dir / "constants.safetensors",
                  lambda tmp: save_file({k: constants[k].contiguous() for k in sorted(used)}, str(tmp)))
    _write_atomic(out_dir / "ir.json", lambda tmp: tmp.write_text(json.dumps(ir, indent=None, separators=(",", ":"))))
    return out_dir / "ir.json"


def _write_atomic(path: Path, write) -> None:
    """write(tmp) to a unique temporary next to path, then renames it to path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the IR is as readable as the model
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_targets(ep) -> set[str]:
    """The parameters and persistent buffers some graph node reads. torch.export lifts every one
    of the module's; a multimodal wrapper run on token ids alone reads none of its vision tower's."""
    from torch.export.graph_signature import InputKind
    used = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
    return {spec.target for spec in ep.graph_signature.input_specs
            if (spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent))
            and spec.arg.name in used}


def _parameter_table(ep, resolve) -> dict:
    """target -> {shape, dtype, checkpoint: resolve(target)} for every parameter the graph reads."""
    from torch.export.graph_signature import InputKind
    params = {}
    read = _read_targets(ep)
    for spec in ep.graph_signature.input_specs:
        if spec.target in read and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            node = next(n for n in ep.graph.nodes if n.name == spec.arg.name)
            val = node.meta["val"]
            params[spec.target] = {"shape": list(val.shape), "dtype": dtype_name(val.dtype),
                                   "checkpoint": resolve(spec.target)}
    return params


def capture_module(module: torch.nn.Module, example_kwargs: dict, dynamic_shapes: dict, out_dir,
                   input_names: dict[str, str] | None = None) -> Path:
    """Captures any nn.Module; its parameters' checkpoint keys are their state-dict names.

    example_kwargs: forward keyword arguments; dynamic_shapes: as torch.export takes them.
    The checkpoint to run it with is the module's state_dict saved as safetensors.
    """
    ops.identify_experts(module)
    constants = _non_persistent_buffers(module)
    ep = export_module(module.eval(), example_kwargs, dynamic_shapes)
    check_step_positions(ep, module)
    params = _parameter_table(ep, lambda key: {"keys": [key], "converter": None})
    names = {spec.arg.name: spec.arg.name for spec in ep.graph_signature.input_specs}
    names.update(input_names or {})
    return _write(ep, module, Path(out_dir), params, constants, names, {"model": {"class": type(module).__name__}})


def _generator_auto(config):
    """The auto class that builds config's text generator. A config whose text config is a
    sub-config (config.get_text_config() is not config) is a multimodal wrapper's, and its
    checkpoint holds the wrapper: AutoModelForMultimodalLM builds that (`...ForConditionalGeneration`,
    whose text-only forward fuselm runs), where AutoModelForCausalLM may map the same config to a
    text-only class with other parameter names. Otherwise AutoModelForCausalLM when its mapping (or
    the config's auto_map) knows the config, else AutoModelForMultimodalLM when that knows it, else
    AutoModelForCausalLM (which says what is wrong)."""
    from transformers import AutoModelForCausalLM, AutoModelForMultimodalLM
    auto_map = getattr(config, "auto_map", None) or {}
    multimodal = type(config) in AutoModelForMultimodalLM._model_mapping
    if multimodal and config.get_text_config() is not config:
        return AutoModelForMultimodalLM
    if type(config) in AutoModelForCausalLM._model_mapping or "AutoModelForCausalLM" in auto_map:
        return AutoModelForCausalLM
    return AutoModelForMultimodalLM if multimodal else AutoModelForCausalLM


def _causal_lm_class(config):
    """The class _generator_auto builds for config, or None."""
    from transformers.models.auto.auto_factory import _get_model_class
    try:
        return _get_model_class(config, _generator_auto(config)._model_mapping)
    except Exception:  # noqa: BLE001 - no causal LM class (remote code, unknown type)
        return None


def _attention_by_hand(cls) -> str | None:
    """Why the model's graph lacks the engine's attention op, when its class says so: a class that
    does not set transformers' _supports_attention_backend flag (set by classes that dispatch
    through AttentionInterface) may compute attention by hand with a mask tensor it builds itself.
    Asked only once the export failed or holds no fuselm.attention op (the structural test), so a
    class that dispatches without setting the flag is not refused for it."""
    if cls is None or getattr(cls, "_supports_attention_backend", False):
        return None
    return (f"{cls.__name__} computes attention by hand (it does not dispatch through transformers' "
            "AttentionInterface); fuselm does not yet find such attention by structure, and its graph "
            "would run without the model's mask and KV cache")


@contextlib.contextmanager
def _one_sequence():
    """transformers looks for several sequences packed in position_ids (masking_utils'
    find_packed_sequence_indices), and under export it cannot tell, so it would put that search
    (aten.diff, cumsum) into the graph. Capture passes one sequence and the engine keeps the
    sequences of a batch apart itself, so the search answers "one sequence" (None) meanwhile."""
    from transformers import masking_utils
    saved = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = saved


@contextlib.contextmanager
def _prepared_masks_pass_through():
    """transformers returns a mask that is already prepared (a 4-D tensor, a BlockMask) as it is when
    it reaches create_causal_mask again: a wrapper builds its language model's mask and hands it
    down, and the language model asks for a mask once more. Capture's prepared mask is a MaskKind
    (masks.py), so that rule is extended to it meanwhile; otherwise the inner call would read the
    MaskKind as a tensor (.ndim) and refuse a model whose mask is plainly causal."""
    from transformers import masking_utils

    from .masks import MaskKind
    saved = masking_utils._preprocess_mask_arguments

    def preprocess(config, inputs_embeds, attention_mask, *args, **kwargs):
        if isinstance(attention_mask, MaskKind):
            return True, attention_mask, None, None, None, None, None
        return saved(config, inputs_embeds, attention_mask, *args, **kwargs)
    masking_utils._preprocess_mask_arguments = preprocess
    try:
        yield
    finally:
        masking_utils._preprocess_mask_arguments = saved


def forward_inputs(model: torch.nn.Module, n: int, tokens) -> tuple[dict, dict]:
    """(example kwargs, dynamic shapes) for exporting a causal LM, following its forward's signature.

    The token positions are passed as position_ids [1, T] when the forward names that argument or
    takes **kwargs, else as cache_position [T] when it names that, else not at all (the model
    computes them; the engine then supplies none). use_cache=False is passed where the forward
    takes it, bound in a shim forward with exactly the graph's inputs as parameters: torch.export
    names a graph input by its parameter and cannot take dynamic shapes for **kwargs entries.
    """
    sig = inspect.signature(model.forward)
    params = sig.parameters
    var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "input_ids" not in params and not var_kw:
        raise CaptureError(f"{type(model).__name__}.forward{sig} takes no input_ids")
    fixed = {"use_cache": False} if "use_cache" in params or var_kw else {}
    forward = model.forward
    ids = torch.zeros(1, n, dtype=torch.long, device="meta")
    pos = torch.arange(n, device="meta")
    if "position_ids" in params or (var_kw and "cache_position" not in params):
        def shim(input_ids, position_ids):
            return forward(input_ids=input_ids, position_ids=position_ids, **fixed)
        kwargs, dynamic = {"input_ids": ids, "position_ids": pos.unsqueeze(0)}, {"position_ids": {1: tokens}}
    elif "cache_position" in params:
        def shim(input_ids, cache_position):
            return forward(input_ids=input_ids, cache_position=cache_position, **fixed)
        kwargs, dynamic = {"input_ids": ids, "cache_position": pos}, {"cache_position": {0: tokens}}
    else:
        def shim(input_ids):
            return forward(input_ids=input_ids, **fixed)
        kwargs, dynamic = {"input_ids": ids}, {}
    model.forward = shim
    dynamic["input_ids"] = {1: tokens}
    return kwargs, dynamic


def ir_dir_for(model_dir: Path) -> Path:
    return model_dir / IR_DIR_NAME


def remote_code_files(config: dict, model_dir: Path) -> list[str]:
    """The Python files of model_dir that config.json's auto_map names (transformers'
    trust_remote_code: "configuration_x.XConfig" is configuration_x.py; "repo--module.Class"
    names another repository's code, reported as such). Empty when there is no auto_map."""
    auto_map = config.get("auto_map") or {}
    refs = []
    for value in auto_map.values():
        refs += value if isinstance(value, list) else [value]
    files = []
    for ref in refs:
        if not isinstance(ref, str) or "." not in ref:
            continue
        repo, _, ref = ref.rpartition("--")
        module = ref.rsplit(".", 1)[0]
        name = f"{repo}:{module}.py" if repo else str(model_dir / f"{module.replace('.', '/')}.py")
        if name not in files:
            files.append(name)
    return files


def _remote_code_gate(config_path: Path, trust_remote_code: bool) -> bool:
    """Whether transformers may run the model directory's own code: only with trust_remote_code,
    and then a line names the files. A config.json that names code refuses capture without it
    (running the library's built-in class instead could silently differ from the shipped code)."""
    try:
        raw = json.loads(config_path.read_text())
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep
        raise CaptureError(f"{config_path}: not readable JSON: {_first_line(e)}") from e
    files = remote_code_files(raw if isinstance(raw, dict) else {}, config_path.parent)
    if not files:
        return False
    if not trust_remote_code:
        raise CaptureError(f"{config_path}: auto_map names Python code shipped with the model ({', '.join(files)}); "
                           f"capture runs it only with --trust-remote-code")
    _progress(f"--trust-remote-code: running the model's own code: {', '.join(files)} (and the files they import)")
    return True


def _has_attention_op(ep) -> bool:
    return any(n.op == "call_function" and str(n.target).startswith("fuselm.attention") for n in ep.graph.nodes)


def _mixes_tokens(ep) -> bool:
    """Whether the graph mixes tokens only through the engine's ops: attention, or the recurrent ops
    of dispatch points (a pure state-space model has no attention at all)."""
    from .dispatch import RECURRENT_OPS
    prefixes = ("fuselm.attention",) + tuple(f"fuselm.{op}" for op in RECURRENT_OPS)
    return any(n.op == "call_function" and str(n.target).startswith(prefixes) for n in ep.graph.nodes)


def _build_and_export(config, kwargs: dict, max_pos, token_max_cut: int = 0):
    """(model on meta, its recomputed non-persistent buffers, ExportedProgram) of config's causal LM.
    token_max_cut lowers the token count's upper bound (see _capture_by_hand)."""
    auto = _generator_auto(config)
    with parameters_on_meta():
        try:
            model = auto.from_config(config, experts_implementation=ops.ATTENTION_NAME, **kwargs)
        except TypeError:
            model = auto.from_config(config, **kwargs)
    model.eval()
    try:
        ops.identify_experts(model)
    except ops.ExpertsCaptureError as e:
        raise CaptureError(f"{type(model).__name__}: {e}") from e
    constants = _non_persistent_buffers(model)
    values = dict(model.named_buffers())  # every buffer's recomputed value (the probes of linear attention)
    model.to("meta")
    # No default context length: the engine refuses a record without one (it sizes the KV cache).
    tokens = torch.export.Dim("num_tokens", min=2, max=max(max_pos or 1 << 20, 16) - token_max_cut)
    example, dynamic = forward_inputs(model, 8, tokens)
    _progress(f"exporting {type(model).__name__} with torch.export ({', '.join(example)})")
    if token_max_cut:  # the eager capture of attention by hand traces on fake CPU tensors
        from .attn_by_hand import on_fake_cpu
        example = on_fake_cpu(model, example)
    with _one_sequence(), _prepared_masks_pass_through():
        # Attention by hand is rewritten before ops the engine lacks are decomposed: its masking
        # ops go away with it, and decomposing them first would hide the pattern.
        ep = export_module(model, example, dynamic, decompose=not token_max_cut, values=values)
    return model, constants, ep


def _capture_by_hand(config, kwargs: dict, max_pos, config_path: Path, first: Exception):
    """(model, constants, ep, context): the eager capture of a model whose fuselm capture failed
    (first) or holds no attention op, with its hand-written attention rewritten into fuselm.attention,
    and the context its masks are proved for (attn_by_hand.context_bound); CaptureError when that is
    not provable either. The token bound is one below the context: a [C, C] mask buffer sliced
    at exactly C tokens makes torch guard T != C (the engine does not read the bound)."""
    from . import attn_by_hand
    if isinstance(first, RecurrenceRefused):
        raise first
    if isinstance(first, (CaptureError, ops.MaskCaptureError)) and "no fuselm.attention op" not in str(first):
        hand = _attention_by_hand(_causal_lm_class(config))
        if hand is None:  # a failure of its own, not of dispatching to fuselm's attention
            raise first
    _progress(f"{type(first).__name__}: {_first_line(first)}; capturing the eager implementation instead")
    try:
        model, constants, ep = _build_and_export(config, dict(kwargs, attn_implementation="eager"), max_pos, 1)
    except Exception as e:  # noqa: BLE001 - neither implementation builds and exports
        if isinstance(first, CaptureError) and "no fuselm.attention op" not in str(first):
            raise first from e
        raise CaptureError(f"{config_path}: transformers cannot build a causal LM for {type(config).__name__} "
                           f"({config.model_type}): {_first_line(first)} (eager: {_first_line(e)})") from e
    tok = next((n.meta["val"].shape[1] for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids"),
               None)
    try:
        found = attn_by_hand.rewrite(ep, constants, int(getattr(config.get_text_config(), "vocab_size", 0) or 0),
                                     max(max_pos or 1 << 20, 16) - 1, tok)
    except attn_by_hand.Refused as e:
        raise CaptureError(f"{type(model).__name__}: {e}") from e
    if not found:
        # Each step runs the new tokens only, over the engine's KV cache; a causal LM whose tokens
        # meet anywhere but in the attention op (a recurrence, an attention not found) would run wrong.
        raise CaptureError(f"{type(model).__name__}: the graph has no fuselm.attention op and no attention "
                           "written by hand was found, so the model mixes tokens by other ops, which the "
                           "engine cannot carry across steps")
    for line in found:
        _progress(f"attention written by hand: {line}")
    context, notice = attn_by_hand.context_bound(max_pos)
    if notice:
        _progress(notice)
    return model, constants, decompose_for_engine(attn_by_hand.bridge_decompositions(ep), model), context


def _dense_context(ep, max_pos):
    """The context the model is captured for: max_pos, lowered to the length up to which its sparse
    attention's top-k key selection is proved to be every key (key_selection.py)."""
    bound = getattr(ep, "fuselm_dense_context", None)
    if bound is None or (max_pos is not None and bound >= max_pos):
        return max_pos
    _progress(f"sparse attention: its top-k key selection is every key up to {bound} tokens, so the context "
              f"is {bound} tokens (the model's config allows {max_pos or 'any'})")
    return bound


def _check_proved_buffers(model, found: dict, ckpt: dict, model_dir: Path) -> None:
    """The checkpoint's copies of the buffers a linear attention was proved with must agree with
    them (linear_attn_by_hand.check_checkpoint_buffers): the model would load those copies."""
    from .linear_attn_by_hand import check_checkpoint_buffers
    try:
        check_checkpoint_buffers(getattr(model, "_fuselm_proved_buffers", {}), found, ckpt, model_dir)
    except ValueError as e:
        raise CaptureError(f"{type(model).__name__}: {e}") from e


def _model_record(model, config_path: Path, text_config, max_pos, unread: list[dict]) -> dict:
    """The IR's "model" record (docs/ir.md): the config, the sizes and token ids the engine reads
    from the text config (a multimodal wrapper's language model keeps them there), and the
    checkpoint tensors of modules the graph never reads (a vision or audio tower)."""
    import transformers

    def ids(field):
        v = getattr(text_config, field, None)
        return v if isinstance(v, int) or (isinstance(v, list) and all(isinstance(x, int) for x in v)) else None

    record = {
        "class": type(model).__name__,
        "transformers_version": transformers.__version__,
        "config_json": config_path.read_text(),
        "max_position_embeddings": max_pos,
        "vocab_size": int(getattr(text_config, "vocab_size", 0) or 0) or None,
        "eos_token_id": ids("eos_token_id"),
        "bos_token_id": ids("bos_token_id"),
    }
    if unread:
        record["unread_modules"] = unread
    return record


def capture_model_dir(model_dir, out_dir=None, trust_remote_code: bool = False, context: int | None = None) -> Path:
    """Captures a Hugging Face causal LM directory (config.json + *.safetensors) to out_dir/ir.json.

    trust_remote_code: a config.json whose auto_map names Python files of the model directory is
    refused unless this is set; with it transformers imports and runs those files.
    context: the context the engine serves, where smaller than the model's: a forward that reads
    its sequence length reads it as this (sequence_length.py). out_dir/sequence_length.json then
    says what was read, {"context": N, "readers": [module, ...]}, for the engine to compare.
    """
    from transformers import AutoConfig

    from . import sequence_length
    sequence_length.served_context, sequence_length.last_read = context, None
    model_dir = Path(model_dir)
    out_dir = Path(out_dir) if out_dir else ir_dir_for(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.exists():
        raise CaptureError(f"{config_path}: not found (a model directory needs config.json)")
    gguf = model_dir / "model.gguf"  # a directory gguf_dir.py prepared: the weights are the GGUF's
    ckpt = {} if gguf.exists() else checkpoint_keys.checkpoint_tensors(model_dir)
    if not ckpt and not gguf.exists():
        raise CaptureError(f"{model_dir}: no *.safetensors files")

    t0 = time.time()
    remote = _remote_code_gate(config_path, trust_remote_code)
    ops.register_interfaces()
    try:
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=remote)
    except Exception as e:  # noqa: BLE001 - unknown model_type, malformed JSON, missing fields, ...
        raise CaptureError(f"{config_path}: transformers cannot build a config from it: {_first_line(e)}") from e
    _progress(f"building {type(config).__name__} ({config.model_type}) on the meta device")
    kwargs = {"attn_implementation": ops.ATTENTION_NAME, "dtype": torch.float32, "trust_remote_code": remote}
    # A multimodal wrapper keeps its language model's settings in a sub-config; transformers'
    # get_text_config() finds it (and is the config itself for a text model).
    text_config = config.get_text_config()
    max_pos = int(getattr(text_config, "max_position_embeddings", 0) or 0) or None
    try:
        model, constants, ep = _build_and_export(config, kwargs, max_pos)
        if not _mixes_tokens(ep):
            raise CaptureError("no fuselm.attention op")
    except Exception as e:  # noqa: BLE001 - by hand: the model's own dict lacks fuselm, or no attention op
        # The model may compute attention by hand: capture it through its eager implementation
        # (every transformers model accepts it) and find its attention by dataflow (attn_by_hand.py).
        model, constants, ep, max_pos = _capture_by_hand(config, kwargs, max_pos, config_path, e)
    max_pos = _dense_context(ep, max_pos)
    check_step_positions(ep, model)

    model_keys = [s.target for s in ep.graph_signature.input_specs if s.target]
    if gguf.exists():
        from .gguf_capture import gguf_entries
        try:
            found, notes = gguf_entries(model_dir, model, ep, constants)
        except Exception as e:  # noqa: BLE001 - a GGUF that does not fit the model, one line
            raise CaptureError(f"{gguf}: {_first_line(e)}") from e
        for line in notes:
            _progress(line)
    else:
        found = checkpoint_keys.resolve(model, model_keys, ckpt)
        _check_proved_buffers(model, found, ckpt, model_dir)

    # Tied weights (lm_head = embed_tokens) are one tensor under two names; export lifts both, the
    # checkpoint holds one, and the engine loads each checkpoint key once.
    first_name: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        tied[name] = first_name.setdefault(id(p), name)

    def resolve(target):
        if target not in found and tied.get(target, target) != target:
            return dict(resolve(tied[target]), tied_to=tied[target])
        if target not in found:
            raise CaptureError(f"{model_dir}: no checkpoint tensor for parameter {target}")
        entry = dict(found[target])
        if len(entry["keys"]) == 1 and ckpt:
            info = ckpt[entry["keys"][0]]
            entry.update(file=info["file"], dtype=info["dtype"], shape=info["shape"])
        return entry

    params = _parameter_table(ep, resolve)
    input_names = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            input_names[spec.arg.name] = spec.arg.name
    read = {tied.get(t, t) for t in _read_targets(ep)}
    unread = {k for k in model_keys if tied.get(k, k) not in read}
    extra = {"model": _model_record(model, config_path, text_config, max_pos,
                                    checkpoint_keys.unread_modules(model, unread, model_keys, found))}
    path = _write(ep, model, out_dir, params, constants, input_names, extra)
    sequence_length.write_last_read(out_dir)
    _progress(f"wrote {path} ({len(ep.graph.nodes)} graph nodes) in {time.time() - t0:.1f}s")
    return path
