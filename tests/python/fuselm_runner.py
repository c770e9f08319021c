"""Runs `fuselm generate` and reads back its JSON result and logits rows."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np


def generate(fuselm_bin: Path, model_dir: Path, prompt_ids: list[int], max_tokens: int, tmp: Path,
             extra: list[str] | None = None, timeout: float = 600,
             logits: bool = True) -> tuple[dict, np.ndarray | None]:
    """(result JSON, logits [rows, vocab]) with rows = len(prompt) + generated - 1; without `logits`
    no --logits-out (the LM head then runs on the sampled rows only, as in serve) and None."""
    logits_path = tmp / "logits.f32"
    cmd = [str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", ",".join(map(str, prompt_ids)),
           "--max-tokens", str(max_tokens), "--json", "--ignore-eos"]
    cmd += ["--logits-out", str(logits_path)] if logits else []
    cmd += extra or []
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"fuselm failed ({proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not logits:
        return result, None
    raw = np.fromfile(logits_path, dtype=np.float32)
    rows = len(prompt_ids) + len(result["token_ids"]) - 1
    return result, raw.reshape(rows, -1)
