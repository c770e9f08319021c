"""JSON-Schema-Test-Suite conformance of fuselm's constrained decoding (src/grammar).

The suite is the copy shipped inside the PyPI sdist of jsonschema==4.26.0 (json/tests/draft2020-12/).
For every test case, the case's schema goes through Grammar::json_schema(schema, strict=false), the
path of the server's guided_json (build/bench_grammar_check). A refused schema (a keyword the grammar
would not enforce: a 400 from the server) is counted as refused. For an accepted schema, each test's
instance, written as the grammar writes JSON (json.dumps: ", " and ": " separators, no other
whitespace), is fed byte by byte and must be accepted exactly when the suite says it is valid.
An invalid instance accepted is a fail-open (the failure this measures); a valid instance rejected
means the grammar is stricter than the schema (it can generate less than the schema allows, e.g.
1.0 for an integer, or key orders other than the schema's).

    scripts/setup.sh   # builds build/bench_grammar_check
    .venv/bin/pip download --no-deps --no-binary :all: jsonschema==4.26.0 -d /tmp/js
    .venv/bin/python bench/grammar_conformance.py /tmp/js/jsonschema-4.26.0.tar.gz [--markdown]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE_DIR = "json/tests/draft2020-12/"


def load_suite(sdist: Path) -> dict[str, list]:
    """{keyword file stem: [case, ...]} of the draft 2020-12 top-level files."""
    out = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[-1]
            if rel.startswith(SUITE_DIR) and rel.endswith(".json") and "/" not in rel[len(SUITE_DIR):]:
                out[Path(rel).stem] = json.load(tar.extractfile(m))
    return dict(sorted(out.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sdist", type=Path, help="jsonschema-4.26.0.tar.gz")
    ap.add_argument("--bin", type=Path, default=REPO / "build" / "bench_grammar_check")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--show-failures", action="store_true", help="print each fail-open instance")
    a = ap.parse_args()
    suite = load_suite(a.sdist)
    lines, keys = [], []
    for stem, cases in suite.items():
        for case in cases:
            texts = [json.dumps(t["data"], ensure_ascii=False) for t in case["tests"]]
            lines.append(json.dumps({"schema": case["schema"], "instances": texts}, ensure_ascii=False))
            keys.append((stem, case))
    proc = subprocess.run([str(a.bin)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    results = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(results) == len(keys), proc.stderr[-2000:]
    rows = defaultdict(lambda: defaultdict(int))
    refused_by = defaultdict(int)
    for (stem, case), res in zip(keys, results):
        r = rows[stem]
        r["schemas"] += 1
        if res["status"] != "ok":
            r[res["status"]] += 1
            if res["status"] == "refused":
                refused_by[res["keyword"]] += 1
            continue
        for t, ok in zip(case["tests"], res["accepted"]):
            kind = ("valid" if t["valid"] else "invalid") + ("_accepted" if ok else "_rejected")
            r[kind] += 1
            if kind == "invalid_accepted" and a.show_failures:
                print(f"FAIL-OPEN {stem}: {case['description']} / {t['description']}: {json.dumps(t['data'])}")
    cols = ["schemas", "refused", "error", "valid_accepted", "valid_rejected", "invalid_rejected", "invalid_accepted"]
    total = defaultdict(int)
    if a.markdown:
        print("| keyword file | " + " | ".join(cols) + " |")
        print("|" + "---|" * (len(cols) + 1))
    for stem, r in rows.items():
        for c in cols:
            total[c] += r[c]
        if a.markdown:
            print(f"| {stem} | " + " | ".join(str(r[c]) for c in cols) + " |")
        else:
            print(f"{stem:28s} " + " ".join(f"{c}={r[c]}" for c in cols))
    if a.markdown:
        print("| **total** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    else:
        print("total".ljust(28) + " " + " ".join(f"{c}={total[c]}" for c in cols))
    print("refused schemas by keyword: " + ", ".join(f"{k} {n}" for k, n in sorted(refused_by.items(), key=lambda x: -x[1])))
    return 1 if total["invalid_accepted"] else 0


if __name__ == "__main__":
    sys.exit(main())
