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


class _ScalarConstantsOnCpu(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.tensor and args and isinstance(args[0], (bool, int, float)) and \
                torch.device(kwargs.get("device") or "cpu").type == "meta":
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


@contextlib.contextmanager
def scalar_constants_on_cpu():
    """torch.tensor(<a Python number>, device=<the input's device>) made inside forward is created on
    the CPU, not on meta (where capture runs the model): export lifts it as a constant with its value
    (the IR's constants need it; a meta one has none). A 0-d CPU tensor combines with tensors of any
    device, so the traced graph is the same. Gemma 3n's activation sparsity makes its cut-off so."""
    with _ScalarConstantsOnCpu():
        yield
