"""One form for ops the fusers anchor on: pow(x, -0.5) is rsqrt(x), pow(x, 0.5) is sqrt(x).

Gemma 3n and 4 write their RMSNorm as x · pow(mean(x²) + eps, -0.5) (torch.pow, their comment
says, for the same result under Torch and JAX compilers); the RMSNorm fuser (src/fusers/rms_norm.cc)
anchors on rsqrt. ATen's CPU pow takes these two exponents as 1/sqrt and sqrt, so the rewrite
keeps the values the model computes.
"""
from __future__ import annotations

import torch

_AS = {-0.5: torch.ops.aten.rsqrt.default, 0.5: torch.ops.aten.sqrt.default}


def canonical_forms(ep: torch.export.ExportedProgram) -> int:
    """Rewrites aten.pow.Tensor_Scalar with exponent ±0.5 in place; returns how many."""
    n = 0
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.pow.Tensor_Scalar:
            continue
        exponent = node.args[1] if len(node.args) > 1 else node.kwargs.get("exponent")
        if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and float(exponent) in _AS:
            node.target = _AS[float(exponent)]
            node.args, node.kwargs = (node.args[0],), {}
            n += 1
    if n:
        ep.graph_module.recompile()
    return n
