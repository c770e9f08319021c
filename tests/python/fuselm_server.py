"""Starts `fuselm serve` on a free port for a test module and stops it with SIGTERM."""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, fuselm_bin: Path, model_dir: Path, args: list[str], log: Path,
                 launcher: list[str] | None = None, env: dict | None = None):
        """launcher: a command that runs fuselm (e.g. mpirun -np 2); env: the environment (default
        this process's)."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = open(log, "w")
        launcher = launcher or []
        cmd = [*launcher, str(fuselm_bin), "serve", str(model_dir), "--port", str(self.port), *args]
        name = " ".join([*(launcher[:1]), "fuselm serve"])
        # One OpenMP team per server: two servers on a 2-core machine would otherwise oversubscribe.
        env = dict(env if env is not None else os.environ, OMP_WAIT_POLICY="passive")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{name} exited: {log.read_text()[-2000:]}"
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"{name} did not come up: {log.read_text()[-2000:]}")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path: str):
        return self.request("GET", path)

    def post_json(self, path: str, obj, headers: dict | None = None):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        status, data = self.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
        return status, json.loads(data) if data else None

    def metrics(self) -> dict[str, float]:
        """Prometheus samples by name (labels dropped; histograms' _sum/_count kept)."""
        out = {}
        for line in self.get("/metrics")[1].decode().splitlines():
            if line.startswith("#") or not line.strip() or "_bucket" in line:
                continue
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0].removeprefix("fuselm:")] = float(value)
        return out

    def wait_for_metrics(self, pred, what: str, limit_s: float = 300) -> dict[str, float]:
        """The metrics once pred(metrics) holds (AssertionError naming what after limit_s). A finished
        sequence's KV blocks and state slots go back to the pool after its last event is sent
        (Engine::step frees them once the batch is done), so a count read right after a response may
        still include them."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            m = self.metrics()
            if pred(m):
                return m
            time.sleep(0.1)
        raise AssertionError(f"{what}: metrics stayed {self.metrics()}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        finally:
            self.log.close()


def raw_post(server, path: str, body: bytes, headers: dict | None = None):
    """(HTTP status, parsed JSON body or None) of one POST of raw bytes to a running server."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        conn.close()


TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "tests/data/chat-templates"


def model_with_template(src: Path, dst: Path, template: str) -> Path:
    """A model directory `dst` holding links to `src`'s files but chat_template.jinja, which is
    tests/data/chat-templates/`template` (the same weights served with another template)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "chat_template.jinja":
            os.symlink(f.resolve(), dst / f.name)
    (dst / "chat_template.jinja").write_text((TEMPLATES_DIR / template).read_text())
    return dst
