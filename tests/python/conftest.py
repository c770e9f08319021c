"""Shared fixtures: the built fuselm binary, the repository root, and a per-session model cache."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """Cases whose id holds long_ run only in long mode (long_mode.py, scripts/test.sh --long)."""
    import long_mode
    if long_mode.LONG:
        return
    skip = pytest.mark.skip(reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
    for item in items:
        if long_mode.MARK in item.nodeid.split("::", 1)[-1]:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def capture_zygote(tmp_path_factory):
    """One capture fork server per test worker (capture_zygote.py): fuselm's captures fork from a
    process that has imported torch and transformers once, instead of importing them each time.
    FUSELM_TEST_ZYGOTE=0, or a FUSELM_PYTHON of one's own, runs every capture in a fresh Python."""
    import json
    import subprocess
    import capture_zygote as z
    if os.environ.get("FUSELM_TEST_ZYGOTE") == "0" or os.environ.get("FUSELM_PYTHON"):
        yield
        return
    python = str(REPO / ".venv" / "bin" / "python")
    sock = str(tmp_path_factory.mktemp("zygote") / "capture.sock")
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    proc = subprocess.Popen([python, str(Path(z.__file__)), "--serve", sock], env=env, stdout=subprocess.PIPE, text=True)
    state = proc.stdout.readline()
    if proc.poll() is not None or not state:
        yield  # the server did not start: every capture runs in a fresh Python, as without it
        return
    os.environ.update({"FUSELM_PYTHON": str(Path(z.__file__)), z.PYTHON_ENV: python, z.SOCKET_ENV: sock,
                       z.STATE_ENV: json.dumps(json.loads(state))})
    try:
        yield
    finally:
        for k in ("FUSELM_PYTHON", z.PYTHON_ENV, z.SOCKET_ENV, z.STATE_ENV):
            os.environ.pop(k, None)
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def fuselm_bin() -> Path:
    path = Path(os.environ.get("FUSELM_BIN", REPO / "build" / "fuselm"))
    assert path.exists(), f"{path} is missing: build first (cmake -S . -B build -G Ninja && ninja -C build)"
    return path


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")
