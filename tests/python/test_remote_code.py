"""Models whose code ships in the model directory (config.json auto_map, transformers'
trust_remote_code): capture refuses them unless --trust-remote-code, then says which files run;
serving from the captured IR runs no model Python.

The model is a tiny custom directory written here: configuration_toy.py and modeling_toy.py (a
Llama subclass whose logits are scaled by a config field, so running the shipped code is visible
in the logits) and a marker the modeling file writes when imported. The oracle is transformers
with trust_remote_code=True.
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import tiny_models
from parity import check_parity

CONFIG_PY = '''
from transformers import LlamaConfig


class ToyRemoteConfig(LlamaConfig):
    model_type = "fuselm_toy_remote"

    def __init__(self, toy_logit_scale=1.0, **kwargs):
        self.toy_logit_scale = toy_logit_scale
        super().__init__(**kwargs)
'''

MODELING_PY = '''
import os
from pathlib import Path

from transformers import LlamaForCausalLM

from .configuration_toy import ToyRemoteConfig

_marker = os.environ.get("FUSELM_REMOTE_MARKER")
if _marker:
    Path(_marker).write_text("modeling_toy.py was imported")


class ToyRemoteForCausalLM(LlamaForCausalLM):
    config_class = ToyRemoteConfig

    def forward(self, input_ids=None, position_ids=None, use_cache=None, **kwargs):
        out = super().forward(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache, **kwargs)
        out.logits = out.logits * self.config.toy_logit_scale
        return out
'''


@pytest.fixture(scope="module")
def remote_dir(model_cache):
    d = model_cache / "toy_remote"
    if not (d / "config.json").exists():
        tiny_models.build("llama", d)
        (d / "configuration_toy.py").write_text(CONFIG_PY)
        (d / "modeling_toy.py").write_text(MODELING_PY)
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(model_type="fuselm_toy_remote", architectures=["ToyRemoteForCausalLM"], toy_logit_scale=1.7,
                   auto_map={"AutoConfig": "configuration_toy.ToyRemoteConfig",
                             "AutoModelForCausalLM": "modeling_toy.ToyRemoteForCausalLM"})
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def run(fuselm_bin, model_dir, *extra, env=None):
    return subprocess.run([str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                           "--json", *extra], capture_output=True, text=True, timeout=900, env=env)


def test_remote_code_is_refused_by_default_then_runs_with_the_flag_only_at_capture(fuselm_bin, remote_dir, tmp_path,
                                                                                   monkeypatch):
    marker = tmp_path / "imported"
    monkeypatch.setenv("FUSELM_REMOTE_MARKER", str(marker))
    # Without the flag: one error line naming the files and the flag; the code never ran.
    proc = run(fuselm_bin, remote_dir)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert "auto_map names Python code shipped with the model" in err, proc.stderr
    assert "modeling_toy.py" in err and "configuration_toy.py" in err and "--trust-remote-code" in err, err
    assert not marker.exists()
    assert not (remote_dir / "fuselm-ir" / "ir.json").exists()

    # With the flag: capture says which files run, runs them, and the engine matches the shipped
    # code (its logit scale) token for token and logit for logit.
    monkeypatch.delenv("FUSELM_REMOTE_MARKER")
    from transformers import AutoModelForCausalLM
    oracle = AutoModelForCausalLM.from_pretrained(remote_dir, trust_remote_code=True, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    assert type(oracle).__name__ == "ToyRemoteForCausalLM"
    monkeypatch.setenv("FUSELM_REMOTE_MARKER", str(marker))
    proc = run(fuselm_bin, remote_dir, "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "--trust-remote-code: running the model's own code" in ln)
    assert str(remote_dir / "configuration_toy.py") in line and str(remote_dir / "modeling_toy.py") in line, line
    assert marker.exists()
    prompt = [int(x) for x in np.random.default_rng(5).integers(0, 512, size=9)]
    check_parity("toy_remote", fuselm_bin, remote_dir, prompt, tmp_path, max_tokens=8, model=oracle)

    # Serving from the captured IR imports none of the model's Python, with or without the flag.
    marker.unlink()
    proc = run(fuselm_bin, remote_dir)
    assert proc.returncode == 0, proc.stderr
    assert "capturing" not in proc.stderr
    assert not marker.exists()


def test_logit_scale_of_the_shipped_code_is_what_parity_saw(remote_dir):
    """The oracle really runs the shipped code: its logits are the plain Llama's times the scale."""
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        custom = AutoModelForCausalLM.from_pretrained(remote_dir, trust_remote_code=True, dtype=torch.float32).eval()
        plain = LlamaForCausalLM.from_pretrained(remote_dir, dtype=torch.float32).eval()
        assert torch.allclose(custom(ids).logits, 1.7 * plain(ids).logits, atol=1e-5)
    assert os.environ.get("FUSELM_REMOTE_MARKER") is None
