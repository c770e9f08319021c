#!/usr/bin/env python3
"""Load check for an OpenAI-compatible server: N clients released at the same instant (a barrier),
each opening its own connection and streaming a greedy completion; every k-th client hangs up after
a few chunks. Reports, per client, how it ended (finished, hung up on purpose, or the exception it
got: connection reset, refused, timeout), checks that every finished stream has the text of the
same request run alone first (--check), and that the server's /metrics come back to no running
request and no KV block in use.

    bench/serving/stress.py --url http://127.0.0.1:8000 --clients 64 --rounds 3 --cancel-every 4

Start the server with a small --kv-cache-memory to force preemption. Exit status 1 when a client
failed, a text differed, or blocks stayed in use. Only the standard library.
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
import urllib.request


def stream(url: str, body: dict, hang_up_after: int | None, timeout: float) -> tuple[str, str]:
    """('finished', text) | ('hung-up', '') | ('error', repr); one fresh connection per request."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return "error", f"HTTP {resp.status}: {resp.read()[:200]!r}"
        text, chunks, done = [], 0, False
        for raw in resp:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
                break
            if not line.startswith("data: "):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return "error", f"error event: {chunk['error']}"
            if chunk.get("choices"):
                text.append(chunk["choices"][0].get("text") or "")
                chunks += 1
            if hang_up_after is not None and chunks >= hang_up_after:
                return "hung-up", ""
        if not done:
            return "error", "the stream ended without data: [DONE]"
        return "finished", "".join(text)
    except (OSError, http.client.HTTPException) as e:
        return "error", repr(e)
    finally:
        conn.close()


def alone(url: str, body: dict, timeout: float) -> str:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["text"]


def metrics(url: str) -> dict[str, float]:
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("#") or not line.strip() or "_bucket" in line:
                continue
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0].removeprefix("fuselm:")] = float(value)
    return out


def run_round(url, bodies, cancel_every, timeout) -> list[tuple[str, str]]:
    results: list[tuple[str, str] | None] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def client(i):
        barrier.wait()
        hang = 2 + i % 5 if cancel_every and i % cancel_every == cancel_every - 1 else None
        results[i] = stream(url, bodies[i], hang, timeout)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results  # type: ignore[return-value]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default=None, help="model id (default: the server's first)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cancel-every", type=int, default=4, help="every k-th client hangs up (0: none)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--distinct", type=int, default=8, help="distinct prompts (their alone texts are checked)")
    ap.add_argument("--check", action="store_true", help="compare each finished text with the request run alone")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()

    with urllib.request.urlopen(args.url + "/v1/models", timeout=60) as r:
        model = args.model or json.load(r)["data"][0]["id"]
    prompts = [f"Write a few words about the number {i}. " * (1 + i % 3) for i in range(args.distinct)]
    bodies = [{"model": model, "prompt": prompts[i % len(prompts)], "max_tokens": args.max_tokens,
               "temperature": 0, "ignore_eos": True} for i in range(args.clients)]
    want = [alone(args.url, b, args.timeout) for b in bodies[:len(prompts)]] if args.check else None
    bad = 0
    for rnd in range(args.rounds):
        t0 = time.perf_counter()
        res = run_round(args.url, bodies, args.cancel_every, args.timeout)
        counts: dict[str, int] = {}
        for i, (how, what) in enumerate(res):
            counts[how] = counts.get(how, 0) + 1
            if how == "error":
                bad += 1
                print(f"round {rnd} client {i}: {what}", file=sys.stderr)
            elif how == "finished" and want is not None and what != want[i % len(prompts)]:
                bad += 1
                print(f"round {rnd} client {i}: text {what!r} != alone {want[i % len(prompts)]!r}", file=sys.stderr)
        print(f"round {rnd}: {counts} in {time.perf_counter() - t0:.1f} s", flush=True)
    deadline = time.monotonic() + 60
    while True:
        m = metrics(args.url)
        if m.get("num_requests_running", 0) == 0 and m.get("num_requests_waiting", 0) == 0 and m.get("kv_blocks_used", 0) == 0:
            break
        if time.monotonic() > deadline:
            print(f"blocks or requests left after the load: {m}", file=sys.stderr)
            bad += 1
            break
        time.sleep(0.2)
    print(f"preemptions {m.get('num_preemptions_total', 0):.0f}, aborted {m.get('request_aborted_total', 0):.0f}, "
          f"finished {m.get('request_success_total', m.get('request_finished_total', 0)):.0f}; "
          f"{'FAILED' if bad else 'ok'} ({bad} problems)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
