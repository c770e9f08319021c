"""bench/serving/bench_serving.py's llama-server command line: every flag it passes is one that the
llama-server built by bench/compare/llamacpp.sh documents in its --help (the oracle: llama.cpp
itself; skipped when it is not built), and each slot's share of the context holds a request's
prompt and output (llama-server divides -c among the -np slots)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FUSELM_BENCH_CACHE", Path.home() / ".cache" / "fuselm-bench"))
LLAMA_SERVER = CACHE / "llama.cpp-0.3.36" / "build" / "bin" / "llama-server"


def _bench_serving():
    spec = importlib.util.spec_from_file_location("bench_serving", REPO / "bench" / "serving" / "bench_serving.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("slots", [1, 4, 16, 64])
def test_each_slot_holds_a_request(slots):
    flags = _bench_serving().llama_server_flags(slots, 128, 128, 2)
    value = lambda name: int(flags[flags.index(name) + 1])
    assert value("-np") == slots
    assert value("-c") // slots >= 128 + 128
    assert value("-t") == value("-tb") == 2


@pytest.mark.skipif(not LLAMA_SERVER.exists(), reason="llama-server not built (bench/compare/llamacpp.sh)")
def test_every_flag_is_one_llama_server_documents():
    out = subprocess.run([str(LLAMA_SERVER), "--help"], capture_output=True, text=True, timeout=60)
    documented = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))
    flags = [f for f in _bench_serving().llama_server_flags(16, 128, 128, 2) if re.fullmatch(r"--?[a-zA-Z][\w-]*", f)]
    assert flags and not [f for f in flags if f not in documented], documented
