"""Writes the captured toy modules that tests/cpp/fusers_mla_test.cc reads (tests/cpp/data/mla/).

Each fixture is the ir.json of one module captured through the normal capture path
(capture_module) with x [1, T, H] (T dynamic): MLA with and without q-LoRA under conventional and
scrambled names, MLA whose latent has no RMSNorm (rejected), a GLU MLP and an ordinary attention
module. Regenerate after an IR or capture
change: python tests/python/make_mla_fixtures.py
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

from test_mla import CONVENTIONAL, HID, SCRAMBLED, ToyAttn, ToyMla, ToyMlp  # noqa: E402

OUT = HERE.parents[1] / "tests" / "cpp" / "data" / "mla"


class Root(nn.Module):
    """The block under the name `block`, called with the token positions 0..T-1, read from a table
    sliced to the length: capture refuses float data computed from an arange of the token count
    (step_positions.py), and these toys only show the fuser the rotary structure."""

    def __init__(self, block: nn.Module, takes_pos: bool):
        super().__init__()
        self.block, self.takes_pos = block, takes_pos
        self.register_buffer("positions", torch.arange(4096), persistent=False)

    def forward(self, x):
        if not self.takes_pos:
            return self.block(x)
        return self.block(x, self.positions[:x.shape[1]])


def capture(name: str, block: nn.Module, takes_pos: bool = True) -> None:
    from fuselm_capture import ops  # noqa: F401  (registers torch.ops.fuselm.attention)
    from fuselm_capture.capture import capture_module
    torch.manual_seed(0)
    t = torch.export.Dim("num_tokens", min=2, max=4096)
    with tempfile.TemporaryDirectory() as d:
        capture_module(Root(block, takes_pos).eval(), {"x": torch.randn(1, 8, HID)}, {"x": {1: t}}, Path(d))
        shutil.copy(Path(d) / "ir.json", OUT / f"{name}.json")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    capture("mla_lora_conventional", ToyMla(CONVENTIONAL, 0, q_lora=True))
    capture("mla_lora_scrambled", ToyMla(SCRAMBLED, 0, q_lora=True))
    capture("mla_direct_scrambled", ToyMla(SCRAMBLED, 0, q_lora=False))
    no_norm = ToyMla(CONVENTIONAL, 0, q_lora=False)
    setattr(no_norm, CONVENTIONAL["kv_norm"], nn.Identity())  # the latent reaches kv_b unnormalized
    capture("mla_no_latent_norm", no_norm)
    capture("glu_mlp", ToyMlp(CONVENTIONAL), takes_pos=False)
    capture("plain_attention", ToyAttn(CONVENTIONAL, 0))
    for p in sorted(OUT.glob("*.json")):
        print(p.relative_to(HERE.parents[1]), p.stat().st_size)


if __name__ == "__main__":
    main()
