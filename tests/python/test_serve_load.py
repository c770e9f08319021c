"""`fuselm serve` under a burst of clients: many connections opened at the same instant are all
answered (cpp-httplib 0.11 listens with a backlog of 5; the overflowed connections of a burst went
through SYN cookies and hung or were reset: the "connection reset by peer" and the 22 of 64
unfinished requests of an earlier benchmark run); 64 concurrent openai-client streams over a pool
too small for them all preempt and still each give the text of the same request run alone, while
other clients hang up mid-stream; afterwards /metrics shows no request running and every block
free."""
from __future__ import annotations

import concurrent.futures as cf
import json
import shutil
import socket
import subprocess
import threading


import openai
import pytest

from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"
BLOCK_BYTES = 16 * 46080  # one 16-token block of the default model's fp32 KV


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    # 40 blocks (640 tokens): 64 streams of ~30 tokens (2 blocks each) cannot all be resident.
    s = Server(fuselm_bin, smollm2_dir, ["--max-num-seqs", "64", "--kv-cache-memory", str(40 * BLOCK_BYTES)],
               tmp_path_factory.mktemp("serve_load") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def _health_over_a_fresh_connection(port: int, barrier: threading.Barrier) -> str:
    barrier.wait()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        return "ok" if data.startswith(b"HTTP/1.1 200") else f"answer {data[:60]!r}"
    except OSError as e:
        return repr(e)


def test_a_burst_of_connections_is_all_answered(server):
    n = 400
    barrier = threading.Barrier(n)
    with cf.ThreadPoolExecutor(n) as pool:
        got = list(pool.map(lambda _: _health_over_a_fresh_connection(server.port, barrier), range(n)))
    failed = [g for g in got if g != "ok"]
    assert not failed, f"{len(failed)} of {n} connections failed, first: {failed[0]}"


@pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2) to read the listen backlog")
def test_the_listen_backlog_is_not_cpp_httplibs_five(server):
    out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True, check=True).stdout
    backlog = int(out.split()[2])  # a listening socket's Send-Q is its backlog
    assert backlog >= 128, out


def _hang_up_after(port: int, chunks: int, barrier: threading.Barrier) -> None:
    body = json.dumps({"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 200, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    barrier.wait()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < chunks:
            chunk = s.recv(4096)
            assert chunk, "the server closed the stream early"
            got += chunk


def test_64_concurrent_streams_with_preemption_and_hang_ups_all_finish_right(server):
    prompts = [f"Write a few words about the number {i}. " * (1 + i % 2) for i in range(8)]

    def run(p, stream, c=None):
        c = c or openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=300)
        kw = dict(model=MODEL, prompt=p, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
        if not stream:
            return c.completions.create(**kw).choices[0].text
        return "".join(x.choices[0].text for x in c.completions.create(stream=True, **kw))

    alone = [run(p, False) for p in prompts]
    assert server.metrics()["num_preemptions_total"] == 0
    before = server.metrics()
    n, hang_ups = 64, 8
    barrier = threading.Barrier(n + hang_ups)

    def stream_client(i):
        c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=300)
        barrier.wait()  # every client connects at the same instant
        return run(prompts[i % len(prompts)], True, c)

    with cf.ThreadPoolExecutor(n + hang_ups) as pool:
        quits = [pool.submit(_hang_up_after, server.port, 2 + i % 3, barrier) for i in range(hang_ups)]
        together = list(pool.map(stream_client, range(n)))
        for q in quits:
            q.result()
    assert together == [alone[i % len(prompts)] for i in range(n)]
    m = server.metrics()
    assert m["num_preemptions_total"] > 0  # the pool was too small for the load
    assert m["request_success_total"] - before["request_success_total"] == n
    server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0
             and m["kv_blocks_used"] == 0 and m["request_aborted_total"] - before["request_aborted_total"] == hang_ups,
             "after the load")


def test_a_second_server_on_the_same_port_is_refused(server, fuselm_bin, smollm2_dir):  # noqa: F811
    # cpp-httplib's default socket options set SO_REUSEPORT, under which this bind succeeded.
    r = subprocess.run([str(fuselm_bin), "serve", str(smollm2_dir), "--port", str(server.port)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert f"cannot listen on 127.0.0.1:{server.port}" in r.stderr, r.stderr[-2000:]
