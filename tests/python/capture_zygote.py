#!/usr/bin/env python3
"""A fork server for capture in the tests: torch and transformers imported once per test worker.

Importing torch and transformers is most of a tiny model's capture (about 9 of 12 s on 2 cores),
and the tests capture well over a hundred tiny models. conftest.py starts one server per test
worker (`--serve SOCKET`, under the venv's Python) and points FUSELM_PYTHON at this file, so that
`fuselm` (src/engine/capture_runner.cc: `$FUSELM_PYTHON -m fuselm_capture MODEL --out DIR`) runs
this file as its "Python". As that client it hands its argv, environment, working directory and
stdin/stdout/stderr to the server, which forks a child that runs `python -m fuselm_capture` exactly
as the interpreter would (runpy, the same argv), and exits with the child's status. The capture
code is the same; only the imports are shared, and each capture runs in a fresh fork, so nothing
one capture patches reaches the next or the test process (whose transformers is the oracle).

The client runs the real interpreter instead ($FUSELM_ZYGOTE_PYTHON, exec) when the server is not
there, or when the request's environment differs from the server's in anything imported modules
may have read (HF_*, TRANSFORMERS_*, TORCH*, HOME, XDG_*, thread settings, PYTHONPATH).
"""
from __future__ import annotations

import json
import os
import socket
import sys

SOCKET_ENV = "FUSELM_ZYGOTE_SOCKET"
PYTHON_ENV = "FUSELM_ZYGOTE_PYTHON"
STATE_ENV = "FUSELM_ZYGOTE_STATE"
# Environment an imported torch, transformers or huggingface_hub may have read at import time.
READ_AT_IMPORT = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "HOME", "XDG_", "OMP_", "MKL_",
                  "PYTHONPATH")


def _import_state(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT)}


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the client went away")
        data += chunk
    return data


def client(argv: list[str]) -> int:
    """As FUSELM_PYTHON: runs `argv` (-m fuselm_capture ...) in a fork of the server, or execs the
    real interpreter when the server cannot run it as that interpreter would."""
    real = os.environ.get(PYTHON_ENV, "")
    path = os.environ.get(SOCKET_ENV, "")
    server_state = json.loads(os.environ.get(STATE_ENV, "null") or "null")
    usable = argv[:2] == ["-m", "fuselm_capture"] and server_state == _import_state(os.environ)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not usable:
            raise OSError("not a capture this server can run")
        sock.connect(path)
    except OSError:
        sock.close()
        os.execv(real, [real, *argv])
    msg = json.dumps({"argv": argv[2:], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(sock, [len(msg).to_bytes(8, "little")], [0, 1, 2])
    sock.sendall(msg)
    status = b""
    while chunk := sock.recv(64):
        status += chunk
    return int(status) if status.strip() else 1


def _run_child(conn: socket.socket) -> None:
    """In the forked child: becomes `python -m fuselm_capture ARGS` with the client's stdio, cwd
    and environment; reports the exit status on conn and exits with it."""
    code = 1
    try:
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        req = json.loads(_recv_exact(conn, int.from_bytes(head, "little")))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import runpy
        sys.argv = ["fuselm_capture", *req["argv"]]
        try:
            runpy.run_module("fuselm_capture", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - what the interpreter would print, then status 1
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(str(code).encode())
        finally:
            os._exit(code)


def serve(path: str) -> None:
    """Imports what capture imports, then forks one child per request on the Unix socket `path`."""
    import signal

    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401
    import fuselm_capture.capture  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    print(json.dumps(_import_state(os.environ)), flush=True)  # ready: the state clients must match
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            _run_child(conn)
        conn.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
