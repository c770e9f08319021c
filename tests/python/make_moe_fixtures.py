"""Writes the captured toy MoE LMs that tests/cpp/fusers_moe_test.cc reads (tests/cpp/data/moe/).

Each fixture is the ir.json of one toy LM of tests/python/test_moe_toys.py (embedding → x + MoE
block(x) → head, the block a hand-written router in front of transformers' Qwen3MoeExperts)
captured through the normal capture path (capture_module), input_ids and position_ids [1, T]
with T dynamic. One fixture per router kind and shared-expert kind of test_moe_toys.CASES, plus
the grouped router with a gated shared expert under scrambled names. Regenerate after an IR or
capture change: python tests/python/make_moe_fixtures.py
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

from test_moe_toys import CASES, build, scramble  # noqa: E402

OUT = HERE.parents[1] / "tests" / "cpp" / "data" / "moe"


def capture(name: str, kind: str, shared: str, transform=None) -> None:
    with tempfile.TemporaryDirectory() as d:
        build(kind, shared, Path(d), transform=transform)
        shutil.copy(Path(d) / "fuselm-ir" / "ir.json", OUT / f"{name}.json")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for kind, shared, _, _ in CASES:
        capture(f"{kind}-{shared}", kind, shared)
    capture("grouped-gated", "grouped", "gated")
    capture("grouped-gated-scrambled", "grouped", "gated", transform=scramble)
    for p in sorted(OUT.glob("*.json")):
        print(p.relative_to(HERE.parents[1]), p.stat().st_size)


if __name__ == "__main__":
    main()
