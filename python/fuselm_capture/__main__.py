"""python -m fuselm_capture MODEL_DIR [--out DIR]: write MODEL_DIR/fuselm-ir/ir.json."""
import argparse
import sys

from .capture import CaptureError, capture_model_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fuselm_capture", description=__doc__)
    p.add_argument("model_dir")
    p.add_argument("--out", help="output directory (default MODEL_DIR/fuselm-ir)")
    a = p.parse_args(argv)
    try:
        capture_model_dir(a.model_dir, a.out)
    except CaptureError as e:
        print(f"fuselm capture: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
