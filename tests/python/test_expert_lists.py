"""Experts outside ExpertsInterface held as a list of per-expert MLP modules (nn.ModuleList, 2-D
weights each) and dispatched by data-dependent code, which torch.export cannot trace: capture proves
the block on a probe (fuselm_capture/expert_lists.py) and gives it the routed form, or refuses
naming the module. No installed transformers family keeps this layout, so the toys here build it:
the dispatch of older transformers MoE code (one-hot mask, loop over hit experts, torch.where,
index_add_) and one with split sizes read by .tolist() (sort by expert, torch.split). The oracle is
each toy's own PyTorch forward.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fuselm_runner
import toy_lm

V, H, I, E, K = 64, 32, 16, 6, 2


class Mlp(nn.Module):
    def __init__(self, glu: bool):
        super().__init__()
        self.w1 = nn.Linear(H, I, bias=False)
        self.w3 = nn.Linear(H, I, bias=False) if glu else None
        self.w2 = nn.Linear(I, H, bias=False)

    def forward(self, x):
        if self.w3 is None:
            return self.w2(F.gelu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MaskLoopBlock(nn.Module):
    """softmax -> top-k -> renormalise; dispatch by a one-hot mask, a loop over the hit experts,
    torch.where and index_add_ (returns the router logits too, as such blocks do)."""

    def __init__(self, glu=True, squared=False):
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList([Mlp(glu) for _ in range(E)])
        self.squared = squared  # weights squared: not a top-k weighted sum, must be refused

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        x = hidden_states.view(-1, h)
        logits = self.gate(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, K, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        if self.squared:
            w = w * w
        out = torch.zeros_like(x)
        mask = F.one_hot(sel, num_classes=E).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            idx, top = torch.where(mask[e].squeeze(0))
            cur = self.experts[e](x[None, top].reshape(-1, h)) * w[top, idx, None]
            out.index_add_(0, top, cur.to(x.dtype))
        return out.reshape(b, s, h), logits


class SplitBlock(nn.Module):
    """sigmoid -> top-k (no renormalisation); tokens sorted by expert, split sizes from .tolist()."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(H, E, bias=True)
        self.experts = nn.ModuleList([Mlp(False) for _ in range(E)])

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        w, sel = torch.topk(torch.sigmoid(self.router(x)), K, dim=-1)
        flat = sel.reshape(-1)
        order = flat.argsort()
        tokens = x.repeat_interleave(K, dim=0)[order]
        counts = torch.bincount(flat, minlength=E).tolist()
        outs = [self.experts[e](chunk) for e, chunk in enumerate(torch.split(tokens, counts)) if chunk.numel()]
        done = torch.empty_like(tokens)
        done[order] = torch.cat(outs)
        y = (done.view(-1, K, shape[-1]) * w[..., None]).sum(1)
        return y.reshape(shape)


class ToyLM(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.block = block
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        y = self.block(x)
        y = y[0] if isinstance(y, tuple) else y
        return self.head(x + y)


PROMPT = [int(x) for x in np.random.default_rng(1).integers(0, V, size=24)]


def build(block, out_dir) -> np.ndarray:
    """Captures the toy into out_dir; returns its own logits over PROMPT (taken before capture,
    which gives the block its routed forward)."""
    torch.manual_seed(0)
    model = ToyLM(block).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3 if p.dim() >= 2 else 0.2)
        ref = model(torch.tensor([PROMPT]), torch.arange(len(PROMPT)).unsqueeze(0))[0].numpy()
    toy_lm.save_toy_lm(model, out_dir, V)
    return ref


@pytest.mark.parametrize("make", [lambda: MaskLoopBlock(), lambda: MaskLoopBlock(glu=False), SplitBlock],
                         ids=["mask_loop_glu", "mask_loop_gelu", "split_sizes_item"])
def test_listed_experts_run_as_the_toy_does(make, fuselm_bin, tmp_path):
    ref = build(make(), tmp_path / "toy")
    ir = (tmp_path / "toy" / "fuselm-ir" / "ir.json").read_text()
    assert "fuselm.experts" in ir  # the dispatch became one experts op
    _, ours = fuselm_runner.generate(fuselm_bin, tmp_path / "toy", PROMPT, 1, tmp_path)
    assert float(np.abs(ours - ref).max()) <= 1e-4 * float(np.abs(ref).max())


def test_unproven_list_is_refused_naming_the_module(tmp_path):
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        build(MaskLoopBlock(squared=True), tmp_path / "toy")
    msg = str(err.value)
    assert "block (MaskLoopBlock)" in msg and "not captured as an experts op" in msg, msg
    assert "list experts of per-expert modules" in msg and "top-k" in msg, msg
