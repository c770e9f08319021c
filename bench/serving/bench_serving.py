#!/usr/bin/env python3
"""Serving benchmark (as vLLM's benchmark_serving): N concurrent streaming clients against an
OpenAI-compatible server, each sending fixed-length prompts (token ids) and asking for a fixed
number of output tokens (ignore_eos), at several concurrencies. Prints, per concurrency, output
tokens/s over the wall time, median and p99 time to first token (TTFT) and time per output token
after the first (TPOT).

    bench/serving/bench_serving.py                      # starts build/fuselm serve on the default model
    bench/serving/bench_serving.py --url http://127.0.0.1:8000 --model NAME   # an already running server
    bench/serving/bench_serving.py --concurrency 1 4 16 64 --prompt-len 128 --output-len 128

Only the standard library: http.client streams, threads as clients.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(args.fuselm), "serve", *([args.model_dir] if args.model_dir else []), "--port", str(port),
           "--max-num-seqs", str(max(args.concurrency)), *args.serve_args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for line in proc.stderr:
        sys.stderr.write(line)
        if "serving " in line:
            break
    else:
        raise SystemExit("fuselm serve exited before it served")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, url


def model_name(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models") as r:
        return json.load(r)["data"][0]["id"]


def one_request(url: str, model: str, prompt: list[int], output_len: int) -> dict:
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first = None
    tokens = 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        elif first is None and chunk["choices"] and chunk["choices"][0]["text"]:
            first = time.perf_counter()
    end = time.perf_counter()
    conn.close()
    first = first or end
    return {"ttft": first - t0, "tpot": (end - first) / max(1, tokens - 1), "tokens": tokens, "e2e": end - t0}


def run_level(url, model, concurrency, num_prompts, prompt_len, output_len, vocab, seed) -> dict:
    rng = random.Random(seed + concurrency)
    # Distinct random prompts, so the prefix cache does not help (it would shorten TTFT).
    prompts = [[rng.randrange(1000, vocab) for _ in range(prompt_len)] for _ in range(num_prompts)]
    results, lock = [], threading.Lock()
    queue = list(prompts)

    def client():
        while True:
            with lock:
                if not queue:
                    return
                p = queue.pop()
            r = one_request(url, model, p, output_len)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
    ttft = [r["ttft"] for r in results]
    tpot = [r["tpot"] for r in results]
    return {"concurrency": concurrency, "requests": len(results), "output_tok_s": sum(r["tokens"] for r in results) / wall,
            "ttft_median_ms": statistics.median(ttft) * 1e3, "ttft_p99_ms": q(ttft, 0.99) * 1e3,
            "tpot_median_ms": statistics.median(tpot) * 1e3, "tpot_p99_ms": q(tpot, 0.99) * 1e3, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an OpenAI-compatible server to measure (default: start fuselm serve)")
    ap.add_argument("--model", help="model id (default: the server's first)")
    ap.add_argument("--fuselm", default=str(REPO / "build" / "fuselm"))
    ap.add_argument("--model-dir", default="", help="model directory for fuselm serve (default: the default model)")
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more fuselm serve options (last)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--prompts-per-client", type=int, default=2, help="requests per client at each concurrency")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=49152, help="random prompt ids are drawn below this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()

    proc = None
    url = args.url
    if not url:
        proc, url = start_server(args)
    try:
        model = args.model or model_name(url)
        one_request(url, model, [1000] * 8, 4)  # warm-up
        rows = []
        print(f"{'streams':>7} {'requests':>8} {'out tok/s':>10} {'TTFT med':>9} {'TTFT p99':>9} {'TPOT med':>9} {'TPOT p99':>9}  (ms)")
        for c in args.concurrency:
            r = run_level(url, model, c, c * args.prompts_per_client, args.prompt_len, args.output_len, args.vocab, args.seed)
            rows.append(r)
            print(f"{c:>7} {r['requests']:>8} {r['output_tok_s']:>10.1f} {r['ttft_median_ms']:>9.0f} {r['ttft_p99_ms']:>9.0f} "
                  f"{r['tpot_median_ms']:>9.1f} {r['tpot_p99_ms']:>9.1f}", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"model": model, "prompt_len": args.prompt_len,
                                                   "output_len": args.output_len, "rows": rows}, indent=1))
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


if __name__ == "__main__":
    main()
