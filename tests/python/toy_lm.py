"""Turns a toy causal LM (a torch module taking input_ids and position_ids) into a model directory
the engine loads: captured through the normal capture path, weights in model.safetensors, and a
config.json that the IR records as the one it was captured from."""
from __future__ import annotations

import json
from pathlib import Path

import torch


def save_toy_lm(model: torch.nn.Module, out_dir: Path, vocab_size: int, max_positions: int = 2048) -> Path:
    """Captures `model` (8 example tokens, dynamic length 2..max_positions) into out_dir/fuselm-ir."""
    from safetensors.torch import save_file
    from fuselm_capture import ops  # noqa: F401  (registers torch.ops.fuselm.*)
    from fuselm_capture.capture import capture_module
    t = torch.export.Dim("num_tokens", min=2, max=max_positions)
    kwargs = {"input_ids": torch.zeros(1, 8, dtype=torch.long), "position_ids": torch.arange(8).unsqueeze(0)}
    ir_dir = out_dir / "fuselm-ir"
    capture_module(model, kwargs, {"input_ids": {1: t}, "position_ids": {1: t}}, ir_dir)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out_dir / "model.safetensors"))
    config = json.dumps({"vocab_size": vocab_size, "max_position_embeddings": max_positions})
    (out_dir / "config.json").write_text(config)
    ir = json.loads((ir_dir / "ir.json").read_text())
    ir["model"].update(config_json=config, vocab_size=vocab_size, max_position_embeddings=max_positions)
    (ir_dir / "ir.json").write_text(json.dumps(ir))
    return out_dir
