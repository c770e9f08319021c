"""fuselm capture: turn a transformers causal LM (or any torch.nn.Module) into fuselm's IR.

The IR is the contract with the C++ engine; docs/ir.md describes it. Entry points:
- capture_model_dir(model_dir, out_dir): an HF model directory (config.json + safetensors).
- capture_module(module, example_kwargs, dynamic, out_dir): any nn.Module, for toy tests.
"""

IR_FORMAT = "fuselm-ir"
IR_VERSION = 1
# The release names what an IR can hold (0.7.0: fuselm.attention's key_select argument, always
# null in an IR; 0.6.0: capture versions carry a source digest, and fuselm.attention's layer_idx is the
# call's order in the graph, one KV layer per call; 0.5.0:
# multimodal wrappers; 0.4.0: alibi_slopes; 0.3.0: attention chunk_size and mask; 0.2.0: experts
# alpha/limit). The digest makes any change to this package's sources a new capture version, so a
# cached IR written by other capture code is recaptured, never reused. CMakeLists.txt computes the
# same string for the engine (ir::kCaptureVersion).
CAPTURE_RELEASE = "0.7.0"


def _source_digest() -> str:
    import hashlib
    from pathlib import Path

    here = Path(__file__).resolve().parent
    files = sorted(p for p in here.iterdir() if p.suffix in (".py", ".txt") and p.is_file())
    text = "".join(f"{p.name}\n{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in files)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


CAPTURE_VERSION = f"{CAPTURE_RELEASE}+{_source_digest()}"

_LAZY = ("capture_model_dir", "capture_module", "CaptureError")


def __getattr__(name):
    # torch and transformers load only when a capture entry point is used: a cached GGUF directory's
    # freshness check (`-m fuselm_capture.gguf_dir`, run on every CLI call given a .gguf) then takes a
    # tenth of a second instead of the seconds of importing torch.
    if name in _LAZY:
        from . import capture

        return getattr(capture, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
