"""fuselm capture: turn a transformers causal LM (or any torch.nn.Module) into fuselm's IR.

The IR is the contract with the C++ engine; docs/ir.md describes it. Entry points:
- capture_model_dir(model_dir, out_dir): an HF model directory (config.json + safetensors).
- capture_module(module, example_kwargs, dynamic, out_dir): any nn.Module, for toy tests.
"""

IR_FORMAT = "fuselm-ir"
IR_VERSION = 1
CAPTURE_VERSION = "0.6.0"  # 0.6.0: fuselm.attention layer_idx is the call's order in the graph (one KV layer per call); 0.5.0: multimodal wrappers (text config; the table lists read parameters only; unread_modules, eos/bos ids); 0.4.0: fuselm.attention alibi_slopes; 0.3.0: fuselm.attention chunk_size and mask (masks read per layer)
# 0.2.0: fuselm.experts alpha/limit, per-expert checkpoint stacks

from .capture import capture_model_dir, capture_module, CaptureError  # noqa: E402,F401
