"""Flags users of llama.cpp and vLLM reach for first: `fuselm --version` and the model given as
`-m/--model` as well as positionally (the same run either way; both at once is an error)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "SmolLM2-135M-Instruct"


def _run(fuselm_bin, *args):
    return subprocess.run([str(fuselm_bin), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_version_prints_the_project_and_capture_versions(fuselm_bin):
    """The engine's capture version (CMake's digest of python/fuselm_capture) is the one capture
    writes into each IR (its __init__.py): were they computed differently, every IR would be
    recaptured on every run, or a stale one reused."""
    proc = _run(fuselm_bin, "--version")
    assert proc.returncode == 0, proc.stderr
    cmake = (REPO / "CMakeLists.txt").read_text()
    want = re.search(r"project\(fuselm VERSION ([0-9.]+)", cmake).group(1)
    out = subprocess.run([sys.executable, "-c", "import fuselm_capture as f; print(f.CAPTURE_VERSION)"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "python")))
    assert out.returncode == 0, out.stderr
    capture = out.stdout.strip()
    assert re.fullmatch(r"[0-9.]+\+[0-9a-f]{12}", capture), capture
    assert proc.stdout.strip() == f"fuselm {want} (capture {capture})"


def _generate(fuselm_bin, *model_args):
    proc = _run(fuselm_bin, "generate", *model_args, "--prompt-ids", "1,2,3", "--max-tokens", "4", "--json",
                "--ignore-eos")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_model_flag_is_the_positional_model(fuselm_bin):
    by_position = _generate(fuselm_bin, MODEL)
    for flag in ("-m", "--model"):
        by_flag = _generate(fuselm_bin, flag, MODEL)
        assert by_flag["token_ids"] == by_position["token_ids"]
        assert by_flag["logprobs"] == by_position["logprobs"]


def test_model_given_twice_is_a_one_line_error(fuselm_bin):
    proc = _run(fuselm_bin, "generate", MODEL, "-m", MODEL, "--prompt-ids", "1", "--max-tokens", "1")
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "--model" in proc.stderr
