"""Capture under contention and in read-only places.

- Two processes that find no IR at once: one captures, the other waits on the lock and reuses
  its IR; no temporary is left behind and both generate what transformers generates.
- A model directory the user cannot write: the IR goes to $FUSELM_CACHE keyed by the model's
  content, later runs find it there, and `inspect` says where it is. The directory is a read-only
  bind mount (unshare -m), since root writes through any mode bits.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import tiny_models

PROMPT = [1, 2, 3]
TIMEOUT = 600


def gen_cmd(fuselm_bin: Path, model_dir: Path, *extra: str) -> list[str]:
    return [str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-tokens", "3", "--ignore-eos", "--json", *extra]


def transformers_greedy(model_dir: Path, n: int) -> list[int]:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=n, do_sample=False)
    return out[0, len(PROMPT):].tolist()


def test_two_captures_at_once(fuselm_bin, tmp_path):
    model = tmp_path / "llama"
    tiny_models.build("llama", model)
    procs = [subprocess.Popen(gen_cmd(fuselm_bin, model), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    captured = [err for _, err in outs if "fuselm capture: wrote" in err]
    assert len(captured) == 1, "\n---\n".join(err for _, err in outs)
    assert sorted(f.name for f in (model / "fuselm-ir").iterdir()) == [".capture.lock", "constants.safetensors",
                                                                      "ir.json"]
    expected = transformers_greedy(model, 3)
    for out, _ in outs:
        assert json.loads(out.splitlines()[-1])["token_ids"] == expected


READ_ONLY = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"']


def read_only_mounts_work(tmp: Path) -> bool:
    """Whether this process may mount: unshare -m and a read-only bind mount (root in most containers)."""
    d = tmp / "probe"
    d.mkdir()
    proc = subprocess.run([*READ_ONLY, str(d), "touch", str(d / "x")], capture_output=True, text=True)
    return shutil.which("unshare") is not None and "Read-only file system" in proc.stderr


def test_read_only_model_dir_uses_the_cache(fuselm_bin, tmp_path):
    # The model directory is a read-only bind mount in a mount namespace of the fuselm process
    # alone: a real EROFS, whatever the user (root writes through any mode bits).
    if not read_only_mounts_work(tmp_path):
        pytest.skip("needs unshare -m and mount (root with CAP_SYS_ADMIN)")
    model = tmp_path / "llama"
    tiny_models.build("llama", model)
    cache = tmp_path / "cache"
    env = {**os.environ, "FUSELM_CACHE": str(cache)}

    def run(*cmd):
        return subprocess.run([*READ_ONLY, str(model), *cmd], capture_output=True, text=True, env=env, timeout=TIMEOUT)

    first = run(*gen_cmd(fuselm_bin, model))
    assert first.returncode == 0, first.stderr
    assert "is not writable; the IR goes to" in first.stderr, first.stderr
    assert not (model / "fuselm-ir").exists()
    [ir_dir] = [d for d in cache.iterdir() if d.name != "verified"]  # verified/: fuselm verify's records (and its hint)
    assert ir_dir.name.startswith("llama-") and (ir_dir / "ir.json").is_file()
    expected = transformers_greedy(model, 3)
    assert json.loads(first.stdout.splitlines()[-1])["token_ids"] == expected

    again = run(*gen_cmd(fuselm_bin, model, "--no-capture"))  # found in the cache: no capture
    assert again.returncode == 0, again.stderr
    assert "capturing" not in again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["token_ids"] == expected

    where = run(str(fuselm_bin), "inspect", str(model), "--no-capture", "--json")
    assert where.returncode == 0, where.stderr
    assert json.loads(where.stdout)["ir"] == str(ir_dir / "ir.json")
    text = run(str(fuselm_bin), "inspect", str(model), "--no-capture")
    assert f"ir: {ir_dir / 'ir.json'}" in text.stdout.splitlines(), text.stdout[:500]

    # The cache is keyed by content: another config gets its own IR directory.
    cfg = json.loads((model / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-3
    (model / "config.json").write_text(json.dumps(cfg))
    other = run(*gen_cmd(fuselm_bin, model))
    assert other.returncode == 0, other.stderr
    assert len([d for d in cache.iterdir() if d.name != "verified"]) == 2
