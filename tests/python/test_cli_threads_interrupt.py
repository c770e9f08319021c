"""`fuselm chat` stops a reply within a token of Ctrl-C (SIGINT sent mid-reply: the tokens printed
after it are counted, not timed), and -t/--threads on every command that runs a model: accepted,
wrong values refused naming the flag, the count reaching the engine's loop (the kernel pool of a
serving process grows to it) and the greedy tokens unchanged."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def tok(smollm2_dir):  # noqa: F811
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smollm2_dir)


def _read_until(proc, buf: bytearray, pred, limit_s=600):
    """Reads proc.stdout into buf until pred(buf) (a safety limit, not a measurement)."""
    fd = proc.stdout.fileno()
    end = time.monotonic() + limit_s
    while not pred(buf):
        assert time.monotonic() < end, bytes(buf)[-500:]
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 4096)
            assert chunk, f"chat exited: {bytes(buf)[-500:]!r}"
            buf += chunk


def test_ctrl_c_stops_a_chat_reply_within_a_token(fuselm_bin, smollm2_dir, tok):  # noqa: F811
    proc = subprocess.Popen([str(fuselm_bin), "chat", str(smollm2_dir), "--temperature", "0", "--max-tokens", "3000"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b"Write a very long story about a dragon who learns to bake bread.\n")
        proc.stdin.flush()
        out = bytearray()
        _read_until(proc, out, lambda b: len(tok(b.decode("utf-8", "ignore"))["input_ids"]) >= 20)
        before = bytes(out)
        proc.send_signal(signal.SIGINT)
        _read_until(proc, out, lambda b: b.endswith(b"\n"))
        proc.stdin.write(b"/exit\n")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = bytes(out).decode()
    assert text.endswith(" [stopped]\n"), text[-300:]
    reply = text[:-len(" [stopped]\n")]
    assert reply.startswith(before.decode("utf-8", "ignore"))
    after = len(tok(reply)["input_ids"]) - len(tok(before.decode("utf-8", "ignore"))["input_ids"])
    # One token may be in print when the signal lands, and one more can sit in the pipe unread.
    assert after <= 2, (after, reply[len(before):])


MODEL_COMMANDS = [
    ["generate", "--prompt", "hi", "--max-tokens", "1"],
    ["chat", "--max-tokens", "1"],
    ["serve", "--port", "0"],
    ["verify"],
]


@pytest.mark.parametrize("cmd", MODEL_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("value", ["0", "-3", "two", "1.5"])
def test_wrong_thread_counts_are_refused_naming_the_flag(fuselm_bin, smollm2_dir, cmd, value):  # noqa: F811
    p = subprocess.run([str(fuselm_bin), cmd[0], str(smollm2_dir), *cmd[1:], "-t", value], input="", capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0
    assert "--threads" in p.stderr and p.stderr.strip().count("\n") == 0, p.stderr


def test_bench_threads_list_keeps_the_same_name(fuselm_bin):
    p = subprocess.run([str(fuselm_bin), "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert "-t,--threads" in p.stdout
    for cmd in ("serve", "chat", "generate", "verify"):
        h = subprocess.run([str(fuselm_bin), cmd, "--help"], capture_output=True, text=True, timeout=60).stdout
        assert "-t,--threads" in h, cmd


def _generate(fuselm_bin, smollm2_dir, *extra):  # noqa: F811
    p = subprocess.run([str(fuselm_bin), "generate", str(smollm2_dir), "--prompt", "The capital of France is",
                        "--max-tokens", "12", "--json", *extra], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.splitlines()[-1]), p.stderr


def test_threads_flag_sets_the_compute_threads_and_keeps_the_tokens(fuselm_bin, smollm2_dir):  # noqa: F811
    base, _ = _generate(fuselm_bin, smollm2_dir)
    for t in ("1", "3"):
        got, err = _generate(fuselm_bin, smollm2_dir, "--threads", t)
        assert f"({t} compute threads)" in err
        assert got["token_ids"] == base["token_ids"]


def _tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_serve_threads_reach_the_engine_loop(fuselm_bin, smollm2_dir, tmp_path):  # noqa: F811
    # The kernels' pool starts a worker per extra thread the first time a step needs it: a server
    # at -t 1 runs without any, one at -t 3 with two, everything else (HTTP pool, engine loop) equal.
    counts = {}
    for t in (1, 3):
        env = dict(os.environ)
        env.pop("OMP_NUM_THREADS", None)
        s = Server(fuselm_bin, smollm2_dir, ["-t", str(t), "--max-num-seqs", "2", "--kv-cache-memory", "64MiB"],
                   tmp_path / f"serve{t}.log", env=env)
        try:
            status, _ = s.post_json("/v1/completions", {"prompt": "Once upon a time " * 20, "max_tokens": 8})
            assert status == 200
            counts[t] = _tasks(s.proc.pid)
        finally:
            assert s.stop() == 0
        assert f"({t} compute threads)" in Path(s.log_path).read_text()
    assert counts[3] - counts[1] == 2, counts
