"""Soak test of `fuselm serve` (scripts/test.sh --long), bounded in time.

    .venv/bin/python tests/soak/soak.py [--seconds 120] [--clients 12] [--bin build/fuselm]

Concurrent clients, for --seconds, each drawing one of: a streamed completion read to the end, a
stream the client hangs up on after two events, a chat completion, a malformed body, a body over
--max-body-mb, JSON nested 100,000 deep, max_tokens past the limit, a prompt past the context.
Every answer must be the expected one (200 with [DONE] for full streams; 400/413 naming the fault
for bad requests; 503 is counted as shed load). Then: every KV block is free (/metrics), RSS is
back near its level after warm-up, and SIGTERM while streams are open lets them finish and the
server exit 0. Prints requests served, failed (with reasons), p99 latency of full requests, blocks
free at the end and RSS before/after; exits 1 if anything failed.
"""
from __future__ import annotations

import argparse
import collections
import http.client
import json
import random
import signal
import socket
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
from fuselm_server import Server  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
MAX_BODY_MB = 1
MAX_TOKENS = 256
PROMPTS = ["Once upon a time", "The capital of France is", "Write a haiku about rain.", "1, 2, 3, 4,",
           "Explain photosynthesis in one sentence.", "def fibonacci(n):"]


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Client:
    """One HTTP connection per request (a hung-up stream must not poison the next request)."""

    def __init__(self, port: int):
        self.port = port

    def post(self, path: str, body: bytes, stream: bool = False, hang_up_after: int | None = None):
        """(status, payload): payload is the parsed JSON, or for streams the list of SSE events."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            if not stream or r.status != 200:
                data = r.read()
                return r.status, json.loads(data) if data else None
            events = []
            while True:
                line = r.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    events.append(line[6:].strip())
                    if hang_up_after is not None and len(events) >= hang_up_after:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                        return 200, events
                    if events[-1] == b"[DONE]":
                        break
            return 200, events
        finally:
            conn.close()


def completion(prompt, max_tokens, stream):
    return json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.7,
                       "stream": stream, "ignore_eos": True}).encode()


class Soak:
    def __init__(self, port: int, seed: int):
        self.c = Client(port)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.outcomes = collections.Counter()
        self.failures = collections.Counter()
        self.latencies: list[float] = []

    def record(self, kind: str, ok: bool, why: str = "", latency: float | None = None):
        with self.lock:
            if ok:
                self.outcomes[kind] += 1
                if latency is not None:
                    self.latencies.append(latency)
            else:
                self.failures[f"{kind}: {why}"[:200]] += 1

    def expect_error(self, kind: str, path: str, body: bytes, status: int, words: str):
        got, err = self.c.post(path, body)
        msg = (err or {}).get("error", {}).get("message", "")
        if got == 503:
            self.record("shed (503)", True)
        else:
            self.record(kind, got == status and words in msg, f"got {got} {msg[:120]!r}")

    def one(self):
        kind = self.rng.choices(["stream", "hang_up", "chat", "malformed", "oversized", "deep", "too_many_tokens",
                                 "long_prompt"], weights=[5, 3, 3, 1, 1, 1, 1, 1])[0]
        prompt = self.rng.choice(PROMPTS)
        t0 = time.monotonic()
        if kind == "stream":
            n = self.rng.randint(8, 48)
            status, events = self.c.post("/v1/completions", completion(prompt, n, True), stream=True)
            if status == 503:
                return self.record("shed (503)", True)
            ok = status == 200 and events and events[-1] == b"[DONE]"
            self.record(kind, ok, f"status {status}, last event {events[-1:] if status == 200 else events}",
                        time.monotonic() - t0)
        elif kind == "hang_up":
            status, _ = self.c.post("/v1/completions", completion(prompt, 200, True), stream=True, hang_up_after=2)
            self.record(kind if status != 503 else "shed (503)", status in (200, 503), f"status {status}")
        elif kind == "chat":
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": self.rng.randint(4, 32)}).encode()
            status, r = self.c.post("/v1/chat/completions", body)
            if status == 503:
                return self.record("shed (503)", True)
            self.record(kind, status == 200 and r["choices"][0]["message"]["content"] is not None, f"status {status} {r}",
                        time.monotonic() - t0)
        elif kind == "malformed":
            self.expect_error(kind, "/v1/completions", b'{"prompt": "x", "max_tokens": ', 400, "malformed JSON")
        elif kind == "oversized":
            body = b'{"prompt": "' + b"x" * (MAX_BODY_MB << 21) + b'"}'
            self.expect_error(kind, "/v1/completions", body, 413, "larger than this server accepts")
        elif kind == "deep":
            body = ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
            self.expect_error(kind, "/v1/chat/completions", body, 400, "deeper than")
        elif kind == "too_many_tokens":
            self.expect_error(kind, "/v1/completions", completion(prompt, 10**6, False), 400, "--max-tokens-limit")
        else:
            body = json.dumps({"model": MODEL, "prompt": [1] * 9000, "max_tokens": 1}).encode()
            self.expect_error(kind, "/v1/completions", body, 400, "the prompt has 9000 tokens")

    def run(self, seconds: float, clients: int):
        end = time.monotonic() + seconds

        def loop(i):
            while time.monotonic() < end:
                try:
                    self.one()
                except Exception as e:  # noqa: BLE001  (every unexpected failure is counted, with its reason)
                    self.record("client", False, f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def wait_idle(srv: Server, limit_s: float = 120) -> dict:
    end = time.monotonic() + limit_s
    m = srv.metrics()
    while time.monotonic() < end:
        m = srv.metrics()
        if m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0 and m["kv_blocks_used"] == 0:
            break
        time.sleep(0.2)
    return m


def sigterm_under_load(srv: Server) -> tuple[int, list[str]]:
    """Opens four streams, sends SIGTERM once they run, and checks each still ends with [DONE]."""
    c = Client(srv.port)
    results: list = [None] * 4

    def stream(i):
        try:
            results[i] = c.post("/v1/completions", completion(PROMPTS[i], 48, True), stream=True)
        except Exception as e:  # noqa: BLE001
            results[i] = (0, [f"{type(e).__name__}: {e}".encode()])

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    end = time.monotonic() + 60
    while srv.metrics()["num_requests_running"] < 4 and time.monotonic() < end:
        time.sleep(0.05)
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join()
    problems = [f"stream {i}: {r[0]} {r[1][-1:]}" for i, r in enumerate(results) if r[0] != 200 or r[1][-1] != b"[DONE]"]
    try:
        rc = srv.proc.wait(timeout=120)
    finally:
        srv.log.close()
    return rc, problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--bin", default=str(REPO / "build" / "fuselm"))
    ap.add_argument("--model", default=str(REPO / "models" / MODEL))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    log = Path("/tmp") / f"fuselm-soak-{int(time.time())}.log"
    srv = Server(Path(a.bin), Path(a.model), ["--max-num-seqs", "8", "--max-waiting", "16", "--kv-cache-memory", "128MiB",
                                              "--max-body-mb", str(MAX_BODY_MB), "--max-tokens-limit", str(MAX_TOKENS),
                                              "--request-timeout", "120"], log)
    soak = Soak(srv.port, a.seed)
    for p in PROMPTS[:4]:  # warm-up: every code path once, so the allocator holds what steady state needs
        soak.c.post("/v1/completions", completion(p, 32, True), stream=True)
        soak.c.post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": p}], "max_tokens": 8}).encode())
    wait_idle(srv)
    rss_before = rss_mib(srv.proc.pid)
    t0 = time.monotonic()
    soak.run(a.seconds, a.clients)
    wall = time.monotonic() - t0
    m = wait_idle(srv)
    rss_after = rss_mib(srv.proc.pid)
    rc, drain_problems = sigterm_under_load(srv)

    lat = sorted(soak.latencies)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    served = sum(soak.outcomes.values())
    failed = sum(soak.failures.values())
    grew = rss_after - rss_before
    rss_ok = grew < max(64.0, 0.15 * rss_before)
    blocks_ok = m["kv_blocks_used"] == 0 and m["kv_blocks_free"] == m["kv_blocks_total"]
    print(f"soak: {a.seconds:.0f} s, {a.clients} clients, {wall:.0f} s wall")
    print(f"soak: requests answered as expected: {served} ({dict(soak.outcomes)})")
    print(f"soak: failed: {failed}" + "".join(f"\n  {n} x {why}" for why, n in soak.failures.most_common()))
    print(f"soak: p99 latency of full requests: {p99:.2f} s over {len(lat)}")
    print(f"soak: KV blocks at the end: {m['kv_blocks_free']:.0f} free ({m['kv_blocks_cached']:.0f} of them cached prefixes) of "
          f"{m['kv_blocks_total']:.0f}, {m['kv_blocks_used']:.0f} used, running {m['num_requests_running']:.0f}, "
          f"waiting {m['num_requests_waiting']:.0f}")
    print(f"soak: RSS after warm-up {rss_before:.0f} MiB, after the soak {rss_after:.0f} MiB ({grew:+.0f} MiB)")
    print(f"soak: SIGTERM with 4 open streams: exit {rc}, " + ("all finished with [DONE]" if not drain_problems else
                                                                 "; ".join(drain_problems)))
    ok = failed == 0 and blocks_ok and rss_ok and rc == 0 and not drain_problems
    if not ok:
        print(f"soak: FAILED (server log {log})", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
