#!/usr/bin/env python3
"""Serving benchmark (as vLLM's benchmark_serving): N concurrent streaming clients against an
OpenAI-compatible server, each sending fixed-length prompts (token ids) and asking for a fixed
number of output tokens (ignore_eos), at several concurrencies. Prints, per concurrency, output
tokens/s over the wall time, median and p99 time to first token (TTFT) and time per output token
after the first (TPOT).

    bench/serving/bench_serving.py                      # starts build/fuselm serve on the default model
    bench/serving/bench_serving.py --url http://127.0.0.1:8000 --model NAME   # an already running server
    bench/serving/bench_serving.py --concurrency 1 4 16 64 --prompt-len 128 --output-len 128
    bench/serving/bench_serving.py --concurrency 16 --constrained 8   # 8 of 16 streams under a JSON Schema
    bench/serving/bench_serving.py --engines fuselm llama-server --dtype bf16 --threads 2
                                 # fuselm serve and llama-server on the same weights, one table

With `--engines ... llama-server`, llama.cpp's llama-server (built by bench/compare/llamacpp.sh from
the same llama.cpp source as bench/compare) serves the same weights: the model directory converted
by llama.cpp's own convert_hf_to_gguf.py to a GGUF of --dtype (cached, as bench/compare does), or
--gguf. Its levels interleave with fuselm's (fuselm level c, then llama-server level c). It runs
with the options its README (tools/server/README.md) gives for parallel decoding with many users,
each explicit so that a later llama.cpp default cannot change the comparison silently
(llama_server_flags):

  -np C              one slot per stream, a fresh server per level (C = the concurrency): a slot
                     decodes one request, so fewer slots would queue streams, more would only cost
                     memory
  -c C*(P+O+64)      the context of all slots together (llama-server divides it among the slots):
                     each slot holds its prompt P, its O output tokens and a margin
  -no-kvu            one KV stream per slot (llama-server's default when -np is given): with a
                     unified cache every token attends over the cells of all slots (masked)
  -cb                continuous batching (the default): decodes of all slots and new prompts in one
                     batch each step
  -b 2048 -ub 2048   the logical and physical batch: C prompts of P tokens are read in one forward
                     when they fit (the default -ub 512 splits 16 x 128 prompt tokens in four)
  -fa auto           flash attention where the backend supports it (llama.cpp's default; on the
                     CPU llama-batched-bench decoded 16 sequences faster with it than without)
  -t T -tb T         decode and batch threads = --threads (the same cores as fuselm)
  --no-webui, --log-disable, 127.0.0.1: no UI, no log lines on the measured path
  --llama-args ...   anything more (e.g. --no-repack for a Q4_1 file, see run.sh)

llama-server's throughput is bounded by its own forward: C streams of P prompt and O output tokens
compute C*(P+O) tokens, so its output tok/s is at most (O/(P+O)) x llama-bench's pp rate, and at
1 stream at most its tg rate (bench/compare measures both on the same GGUF). fuselm serve runs with
--dtype and OMP_NUM_THREADS = --threads (its KV cache dtype is serve's default, auto: bf16 for
bf16 or quantized weights; --serve-args --kv-cache-dtype f32 to change it).

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
CACHE = Path(os.environ.get("FUSELM_BENCH_CACHE", Path.home() / ".cache" / "fuselm-bench"))
LLAMACPP = CACHE / "llama.cpp-0.3.36"


def start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(args.fuselm), "serve", *([args.model_dir] if args.model_dir else []), "--port", str(port),
           "--max-num-seqs", str(max(args.concurrency)), *(["--dtype", args.dtype] if args.dtype else []),
           *args.serve_args]
    env = {**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    for line in proc.stderr:
        sys.stderr.write(line)
        if "serving " in line:
            break
    else:
        raise SystemExit("fuselm serve exited before it served")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_model_dir() -> str:
    out = subprocess.run([str(REPO / "scripts" / "prepare_default_model.sh")], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().splitlines()[-1]


def llama_gguf(args) -> Path:
    """--gguf, or the model directory converted by llama.cpp's converter (bench/compare's cache)."""
    if args.gguf:
        return Path(args.gguf)
    sys.path.insert(0, str(REPO / "bench" / "compare"))
    import compare  # noqa: E402 (bench/compare/compare.py: the same conversion and cache)
    d = Path(args.model_dir or default_model_dir())
    ns = argparse.Namespace(cache=str(CACHE), llamacpp=str(LLAMACPP), fuselm=args.fuselm, models=[str(d)])
    name = "SmolLM2-135M" if not args.model_dir else d.name
    return compare.Setup(ns).gguf(name, d, args.dtype or "bf16")


def llama_server_flags(slots: int, prompt_len: int, output_len: int, threads: int) -> list[str]:
    """llama-server's serving flags for `slots` streams of prompt_len + output_len tokens (the
    module docstring says why each): one slot and one KV stream per stream, continuous batching,
    every prompt of a level in one batch when it fits, the same threads as fuselm."""
    ctx = slots * (prompt_len + output_len + 64)
    return ["-np", str(slots), "-c", str(ctx), "-no-kvu", "-cb", "-b", "2048", "-ub", "2048", "-fa", "auto",
            "-t", str(threads), "-tb", str(threads)]


def start_llama_server(args, gguf: Path, slots: int) -> tuple[subprocess.Popen, str]:
    """llama-server with llama_server_flags on 127.0.0.1; waits for /health."""
    port = free_port()
    threads = args.threads or os.cpu_count()
    cmd = [args.llama_server, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           *llama_server_flags(slots, args.prompt_len, args.output_len, threads), "--no-webui", "--log-disable",
           *args.llama_args.split()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}): {' '.join(cmd)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama-server did not become healthy in 600 s")


def stop(proc: subprocess.Popen | None) -> None:
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


def model_name(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models") as r:
        return json.load(r)["data"][0]["id"]


# --constrained: the JSON Schema (vLLM's guided_json) those streams follow; its arrays and strings
# are unbounded so that a constrained stream runs to max_tokens as the others do.
CONSTRAINED_SCHEMA = {"type": "object", "properties": {
    "id": {"type": "string"}, "items": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}, "price": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["new", "sale", "gift"]}}}, "required": ["sku", "quantity"]}},
    "status": {"enum": ["pending", "shipped"]}}, "required": ["id", "items", "status"]}


def one_request(url: str, model: str, prompt: list[int], output_len: int, constrained: bool = False) -> dict:
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    req = {"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0,
           "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if constrained:
        req["guided_json"] = CONSTRAINED_SCHEMA
    body = json.dumps(req)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first = None
    tokens = pieces = 0  # usage's count; streamed pieces when a server sends no usage
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            pieces += 1
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    conn.close()
    tokens = tokens or pieces
    first = first or end
    return {"ttft": first - t0, "tpot": (end - first) / max(1, tokens - 1), "tokens": tokens, "e2e": end - t0,
            "constrained": constrained}


def run_level(url, model, concurrency, num_prompts, prompt_len, output_len, vocab, seed, constrained=0) -> dict:
    rng = random.Random(seed + concurrency)
    # Distinct random prompts, so the prefix cache does not help (it would shorten TTFT).
    prompts = [[rng.randrange(1000, vocab) for _ in range(prompt_len)] for _ in range(num_prompts)]
    results, errors, lock = [], [], threading.Lock()
    queue = list(prompts)

    def client(index):
        while True:
            with lock:
                if not queue:
                    return
                p = queue.pop()
            try:
                r = one_request(url, model, p, output_len, index < constrained)
            except (OSError, RuntimeError, http.client.HTTPException) as e:  # counted, not fatal
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
    ttft = [r["ttft"] for r in results]
    tpot = [r["tpot"] for r in results]
    if errors:
        print(f"  {len(errors)} of {num_prompts} requests failed, first: {errors[0]}", file=sys.stderr)
    if not results:
        raise SystemExit(f"bench_serving: every request at {concurrency} streams failed: {errors[0]}")
    split = {}
    if constrained:  # TPOT of the constrained streams and of the others, apart
        for name, want in (("constrained", True), ("free", False)):
            xs = [r["tpot"] for r in results if r["constrained"] == want]
            split[f"tpot_{name}_median_ms"] = statistics.median(xs) * 1e3 if xs else float("nan")
    return {**split, "concurrency": concurrency, "requests": len(results), "failed": len(errors),
            "output_tok_s": sum(r["tokens"] for r in results) / wall,
            "ttft_median_ms": statistics.median(ttft) * 1e3, "ttft_p99_ms": q(ttft, 0.99) * 1e3,
            "tpot_median_ms": statistics.median(tpot) * 1e3, "tpot_p99_ms": q(tpot, 0.99) * 1e3, "wall_s": wall}


HEADER = (f"{'engine':<13} {'streams':>7} {'requests':>8} {'failed':>6} {'out tok/s':>10} {'TTFT med':>9} {'TTFT p99':>9} "
          f"{'TPOT med':>9} {'TPOT p99':>9}  (ms)")


def row_text(engine: str, r: dict) -> str:
    return (f"{engine:<13} {r['concurrency']:>7} {r['requests']:>8} {r['failed']:>6} {r['output_tok_s']:>10.1f} {r['ttft_median_ms']:>9.0f} "
            f"{r['ttft_p99_ms']:>9.0f} {r['tpot_median_ms']:>9.1f} {r['tpot_p99_ms']:>9.1f}")


def print_summary(rows: dict[str, list[dict]], label: str) -> None:
    """Per concurrency: each engine's output tok/s and its ratio to its own 1-stream figure, the
    fuselm / llama-server ratio, TTFT and TPOT side by side; then the issue's goals, met or not."""
    engines = list(rows)
    base = {e: next((r["output_tok_s"] for r in rows[e] if r["concurrency"] == 1), None) for e in engines}
    both = "fuselm" in rows and "llama-server" in rows
    cols = [f"{'streams':>7}"]
    for e in engines:
        cols += [f"{e[:12] + ' tok/s':>18}", f"{'x 1-stream':>10}"]
    if both:
        cols.append(f"{'fuselm/llama':>12}")
    for e in engines:
        cols.append(f"{e[:6] + ' TTFT med/p99':>20} {e[:6] + ' TPOT med/p99':>19}")
    print(f"summary{' (' + label + ')' if label else ''}, TTFT/TPOT in ms:")
    print(" ".join(cols))
    for i, c in enumerate(r["concurrency"] for r in rows[engines[0]]):
        line = [f"{c:>7}"]
        for e in engines:
            r = rows[e][i]
            ratio = f"{r['output_tok_s'] / base[e]:.2f}x" if base[e] else "-"
            line += [f"{r['output_tok_s']:>18.1f}", f"{ratio:>10}"]
        if both:
            line.append(f"{rows['fuselm'][i]['output_tok_s'] / rows['llama-server'][i]['output_tok_s']:>11.2f}x")
        for e in engines:
            r = rows[e][i]
            line.append(f"{r['ttft_median_ms']:>10.0f}/{r['ttft_p99_ms']:<9.0f} {r['tpot_median_ms']:>9.1f}/{r['tpot_p99_ms']:<9.1f}")
        print(" ".join(line))
    failed = sum(r["failed"] for e in engines for r in rows[e])
    if failed:
        print(f"{failed} requests failed (see the failed column)")
    first = engines[0]
    by_c = {e: {r["concurrency"]: r["output_tok_s"] for r in rows[e]} for e in engines}
    if base[first] and 16 in by_c[first]:
        x = by_c[first][16] / base[first]
        print(f"goal: {first} throughput at 16 streams >= 4x at 1 stream: {x:.2f}x ({'met' if x >= 4 else 'not met'})")
    if both:
        for c in (16, 64):
            if c in by_c["fuselm"] and c in by_c["llama-server"]:
                x = by_c["fuselm"][c] / by_c["llama-server"][c]
                print(f"goal: fuselm >= 1.2x llama-server at {c} streams: {x:.2f}x ({'met' if x >= 1.2 else 'not met'})")


def measure(args, url: str, model: str | None, c: int) -> dict:
    model = model or model_name(url)
    one_request(url, model, [1000] * 8, 4)  # warm-up
    return run_level(url, model, c, c * args.prompts_per_client, args.prompt_len, args.output_len, args.vocab, args.seed,
                     min(args.constrained, c))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an OpenAI-compatible server to measure (instead of starting fuselm serve)")
    ap.add_argument("--model", help="model id (default: the server's first)")
    ap.add_argument("--engines", nargs="+", default=["fuselm"], choices=["fuselm", "llama-server"],
                    help="servers to start and measure, interleaved level by level")
    ap.add_argument("--fuselm", default=str(REPO / "build" / "fuselm"))
    ap.add_argument("--llama-server", default=str(LLAMACPP / "build" / "bin" / "llama-server"),
                    help="llama-server binary (bench/compare/llamacpp.sh builds it)")
    ap.add_argument("--model-dir", default="", help="model directory for fuselm serve (default: the default model)")
    ap.add_argument("--gguf", help="weights for llama-server (default: --model-dir converted to --dtype)")
    ap.add_argument("--dtype", default="", help="weight dtype for both engines (f32, bf16); default: fuselm's auto, "
                                                "llama-server bf16")
    ap.add_argument("--threads", type=int, default=0, help="threads of both servers (default: all cores)")
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more fuselm serve options (last)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--prompts-per-client", type=int, default=2, help="requests per client at each concurrency")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=49152, help="random prompt ids are drawn below this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--constrained", type=int, default=0,
                    help="streams of each level whose requests carry guided_json (constrained decoding); prints "
                         "their TPOT and the others' apart (compare with a run at 0 for the mask's cost)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--llama-args", default="", help="more llama-server options, one string (e.g. '--no-repack')")
    ap.add_argument("--print-gguf", metavar="TYPE", help="print the path of llama.cpp's GGUF of the model at TYPE "
                    "(its converter, then llama-quantize for q4_0/q4_1/...; cached) and exit")
    ap.add_argument("--label", default="", help="names the weights in the summary (e.g. BF16, Q4_1 GGUF)")
    args = ap.parse_args()

    if args.print_gguf:
        print(llama_gguf(argparse.Namespace(**{**vars(args), "gguf": None, "dtype": args.print_gguf})))
        return
    engines = ["url"] if args.url else args.engines
    gguf = llama_gguf(args) if "llama-server" in engines else None
    procs: dict[str, subprocess.Popen | None] = {}
    urls: dict[str, str] = {}
    rows: dict[str, list[dict]] = {e: [] for e in engines}
    try:
        if args.url:
            urls["url"] = args.url
        if "fuselm" in engines:
            procs["fuselm"], urls["fuselm"] = start_server(args)
        print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
        print(HEADER, flush=True)
        for c in args.concurrency:
            for e in engines:
                if e == "llama-server":  # -np is the concurrency: a fresh server per level
                    stop(procs.get(e))
                    procs[e], urls[e] = start_llama_server(args, gguf, c)
                r = measure(args, urls[e], args.model if e == "url" else None, c)
                rows[e].append(r)
                print(row_text(args.url or e, r), flush=True)
                if "tpot_constrained_median_ms" in r:
                    print(f"  TPOT median: {r['tpot_constrained_median_ms']:.1f} ms constrained, "
                          f"{r['tpot_free_median_ms']:.1f} ms unconstrained", flush=True)
        print()
        print_summary(rows, args.label)
        print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
        if args.json:
            Path(args.json).write_text(json.dumps({"prompt_len": args.prompt_len, "output_len": args.output_len,
                                                   "dtype": args.dtype, "threads": args.threads,
                                                   "gguf": str(gguf) if gguf else None, "rows": rows}, indent=1))
    finally:
        for p in procs.values():
            stop(p)


if __name__ == "__main__":
    main()
