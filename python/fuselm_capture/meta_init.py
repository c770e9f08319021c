"""Build a module with parameters on the meta device and buffers computed for real on the CPU.

Parameters are bytes in the checkpoint; the engine reads them from there, so capture never needs
them. Non-persistent buffers (rope inv_freq, Gemma's embed_scale) are computed in __init__ and are
not in any checkpoint, so they must be real: only register_parameter is redirected to meta.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn


@contextlib.contextmanager
def parameters_on_meta():
    original = nn.Module.register_parameter

    def register_parameter(module, name, param):
        original(module, name, param)
        p = module._parameters[name]
        if p is not None and p.device.type != "meta":  # tied weights re-register a meta param: keep it
            module._parameters[name] = nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = register_parameter
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def _numbers(data) -> bool:
    """Whether data is a Python number or a (nested) list or tuple of them."""
    if isinstance(data, (bool, int, float)):
        return True
    return isinstance(data, (list, tuple)) and all(_numbers(x) for x in data)


class _ConstantsOnCpu(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.tensor and args and _numbers(args[0]) and \
                torch.device(kwargs.get("device") or "cpu").type == "meta":
            kwargs["device"] = "cpu"
            out = func(*args, **kwargs)
            # A 0-d CPU tensor combines with tensors of any device; a longer one is moved, in the graph.
            return out if out.dim() == 0 else out.to("meta")
        return func(*args, **kwargs)


@contextlib.contextmanager
def constants_on_cpu():
    """torch.tensor(<Python numbers>, device=<the input's device>) made inside forward is created on
    the CPU, not on meta (where capture runs the model): export lifts it as a constant with its value
    (the IR's constants need it; a meta one has none). A 0-d one stays there (it combines with
    tensors of any device, so the traced graph is the same); a longer one is moved to meta by an op
    of the graph, which the engine reads as no move. Gemma 3n's activation sparsity makes such a
    cut-off; longrope's factors are such a list (sequence_length.py)."""
    with _ConstantsOnCpu():
        yield
