"""Which tiny parity families the default run keeps: a cover of every structure any family holds.

A family's structure is what its captured graph holds, read from the graph and never from its
name: the op kinds of its IR, and each module fuselm inspect reports (fuser, status, detail) with
the numbers in the detail written as # unless they are 0 or 1 (one KV head is another structure
than two; 64 wide is not another structure than 96). The default run keeps a small set of families
(greedy: the family adding the most structures not yet held, ties in FAMILIES order) whose
structures together hold every family's; long mode runs every family, and
test_parity.py::test_long_parity_cover_is_complete fails when a family holds a structure the
default set misses, naming it (then rerun this file with --write).

    python tests/python/parity_cover.py --models DIR [--write]
DIR holds one directory per family (tiny_models.build), each captured (fuselm-ir/ir.json); a
family directory missing there is built and captured.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COVER_FILE = HERE / "parity_cover.txt"


def _shape_free(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", lambda m: m.group(0) if m.group(0) in ("0", "1") else "#", text)


def structures(fuselm_bin: Path, model_dir: Path) -> set[str]:
    """The structures of one captured family: 'op <kind>' per IR op kind, 'fuser <fuser> <status>
    <detail>' per module inspect reports. Raises RuntimeError when inspect fails (the model is not
    captured, or does not load)."""
    ir = json.loads((model_dir / "fuselm-ir" / "ir.json").read_text())
    found = {f"op {n['op']}" for n in ir["nodes"]}
    p = subprocess.run([str(fuselm_bin), "inspect", "--json", "--no-capture", str(model_dir)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"fuselm inspect {model_dir}: {p.stderr.strip()[-500:]}")
    for m in json.loads(p.stdout)["modules"]:
        found.add(_shape_free(f"fuser {m.get('fuser')} {m.get('status')} {m.get('detail', '')}"))
    return found


def choose(by_family: dict[str, set[str]]) -> list[str]:
    """A small set of families whose structures hold every family's (greedy set cover; the order
    of by_family breaks ties, so the result is deterministic)."""
    left = set().union(*by_family.values()) if by_family else set()
    chosen: list[str] = []
    while left:
        best = max(by_family, key=lambda f: len(by_family[f] & left))
        chosen.append(best)
        left -= by_family[best]
    return chosen


def missing(by_family: dict[str, set[str]], default: list[str]) -> dict[str, set[str]]:
    """Per family, the structures none of the default families holds (empty when covered)."""
    held = set().union(*(by_family[f] for f in default if f in by_family))
    return {f: s - held for f, s in by_family.items() if s - held}


def read_default() -> list[str]:
    """The families parity_cover.txt keeps in the default run."""
    return [ln.strip() for ln in COVER_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _main() -> int:
    sys.path.insert(0, str(HERE))
    import tiny_models

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="one captured directory per family")
    ap.add_argument("--fuselm", type=Path, default=HERE.parents[1] / "build" / "fuselm")
    ap.add_argument("--write", action="store_true", help=f"write the cover to {COVER_FILE.name}")
    args = ap.parse_args()
    by_family = {}
    for family in tiny_models.FAMILIES:
        d = args.models / family
        if not (d / "config.json").exists():
            tiny_models.build(family, d)
        if not (d / "fuselm-ir" / "ir.json").exists():
            subprocess.run([str(args.fuselm), "inspect", str(d)], capture_output=True, check=True, timeout=1800)
        by_family[family] = structures(args.fuselm, d)
    chosen = choose(by_family)
    for f in chosen:
        print(f"{f}: {len(by_family[f])} structures")
    print(f"{len(chosen)} of {len(by_family)} families hold all {len(set().union(*by_family.values()))} structures")
    if args.write:
        COVER_FILE.write_text("# Written by tests/python/parity_cover.py --write: the tiny families the default run\n"
                              "# keeps (together they hold every family's captured structures); long mode runs all.\n"
                              + "".join(f"{f}\n" for f in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
