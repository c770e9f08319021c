"""python -m fuselm_capture MODEL_DIR [--out DIR] [--trust-remote-code] [--context N]: write MODEL_DIR/fuselm-ir/ir.json."""
import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fuselm_capture", description=__doc__)
    p.add_argument("model_dir")
    p.add_argument("--out", help="output directory (default MODEL_DIR/fuselm-ir)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the Python files the model directory ships (config.json auto_map)")
    p.add_argument("--context", type=int, default=None,
                   help="the context the engine serves, where smaller than the model's: a RoPE that depends on the "
                        "sequence length is fixed for it (python/fuselm_capture/sequence_length.py)")
    a = p.parse_args(argv)
    try:
        from .capture import capture_model_dir  # torch and transformers load here
        capture_model_dir(a.model_dir, a.out, trust_remote_code=a.trust_remote_code, context=a.context)
    except Exception as e:  # noqa: BLE001 - whatever fails is one line, never a traceback
        if type(e).__name__ == "CaptureError":  # CaptureError itself may not have imported
            msg = str(e)
        else:
            from .messages import reason
            first = reason(str(e))
            msg = f"{type(e).__name__}: {first}" if first else type(e).__name__
        print(f"fuselm capture: error: {' '.join(msg.split())}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
