"""End-to-end tokens/s of the default model at f32, --dtype q8_0, --dtype q4_0 and from its Q4_1
GGUF, measured interleaved in one run (round-robin, so machine load hits every row alike).

    .venv/bin/python bench/quant_e2e.py [--rounds 3] [--prompt 128] [--tokens 32] [--threads 2]

Prints a table of median prefill and decode tokens/s per row and each row's ratio to f32 (ratios
are what to read on a shared machine). Uses `fuselm generate --json` (its prefill_seconds and
decode_seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))


def run(bin_, model, extra, prompt_ids, tokens, env):
    cmd = [str(bin_), "generate", str(model), "--prompt-ids", ",".join(map(str, prompt_ids)), "--max-tokens",
           str(tokens), "--ignore-eos", "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return len(prompt_ids) / r["prefill_seconds"], (tokens - 1) / r["decode_seconds"]


def main() -> int:
    from fuselm_capture import prepare_default

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bin", default=str(REPO / "build" / "fuselm"))
    a = p.parse_args()
    fp32 = prepare_default.prepare_default_model(prepare_default.DEFAULT_OUT)
    gguf = prepare_default.find_default_gguf()
    rows = {"f32": (fp32, ["--dtype", "f32"]), "q8_0": (fp32, ["--dtype", "q8_0"]),
            "q4_0": (fp32, ["--dtype", "q4_0"]), "gguf Q4_1": (gguf, [])}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    prompt_ids = [(i * 7919) % 40000 + 100 for i in range(a.prompt)]
    for model, extra in rows.values():  # warm: captures, page cache
        run(a.bin, model, extra, prompt_ids[:8], 2, env)
    res = {k: ([], []) for k in rows}
    for _ in range(a.rounds):
        for name, (model, extra) in rows.items():
            pf, dc = run(a.bin, model, extra, prompt_ids, a.tokens, env)
            res[name][0].append(pf)
            res[name][1].append(dc)
    base = [statistics.median(v) for v in res["f32"]]
    print(f"{'weights':<10} {'prefill tok/s':>14} {'x f32':>6} {'decode tok/s':>13} {'x f32':>6}")
    for name, (pf, dc) in res.items():
        mp, md = statistics.median(pf), statistics.median(dc)
        print(f"{name:<10} {mp:>14.1f} {mp / base[0]:>6.2f} {md:>13.1f} {md / base[1]:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
