#!/usr/bin/env python3
"""transformers eager (PyTorch) timed as llama-bench times llama.cpp: pp<n> is one forward of n
random prompt tokens (KV cache on, logits of the last position only, as generate() asks), tg<n> is
n single-token forwards over a growing DynamicCache from an empty one; one warm-up each; prints
llama-bench's JSON fields (n_prompt, n_gen, n_depth, n_threads, samples_ns, avg_ts, stddev_ts, ...)
plus weight_dtype, one object per test, as a JSON array.

    hf_bench.py MODEL_DIR --dtype bf16 -p 512 -n 128 -r 5 -t 2
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def ts_stats(row: dict) -> dict:
    n = row["n_prompt"] + row["n_gen"]
    ts = [1e9 * n / ns for ns in row["samples_ns"]]
    row["samples_ts"] = ts
    row["avg_ns"] = int(statistics.fmean(row["samples_ns"]))
    row["stddev_ns"] = int(statistics.stdev(row["samples_ns"])) if len(ts) > 1 else 0
    row["avg_ts"] = statistics.fmean(ts)
    row["stddev_ts"] = statistics.stdev(ts) if len(ts) > 1 else 0.0
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=1)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.set_num_threads(args.t)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1234)

    def pp(n: int) -> None:
        ids = torch.randint(0, vocab, (1, n), generator=gen)
        model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)

    def tg(n: int) -> None:
        cache = DynamicCache()
        for _ in range(n):
            ids = torch.randint(0, vocab, (1, 1), generator=gen)
            model(input_ids=ids, past_key_values=cache, use_cache=True)

    rows = []
    with torch.inference_mode():
        for n_prompt, n_gen, fn, n in ((args.p, 0, pp, args.p), (0, args.n, tg, args.n)):
            if n <= 0:
                continue
            fn(n if fn is pp else 1)  # warm-up
            row = {"model_filename": args.model_dir, "n_threads": args.t, "n_prompt": n_prompt, "n_gen": n_gen,
                   "n_depth": 0, "weight_dtype": args.dtype, "backends": "transformers-eager", "samples_ns": []}
            for _ in range(args.r):
                t0 = time.perf_counter_ns()
                fn(n)
                row["samples_ns"].append(time.perf_counter_ns() - t0)
            rows.append(ts_stats(row))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
