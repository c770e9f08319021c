"""The attention op's ALiBi slopes (alibi_slopes) against torch, and under tensor parallelism.

A toy causal LM whose attention is the engine's fuselm::attention op with per-head ALiBi slopes is
captured as is; its reference forward computes the same attention in plain torch (scores scaled,
plus slope[h] x key position, causal mask, softmax, GQA by repeating the KV heads). fuselm's logits
must match the reference's, with one process and with the heads split over two MPI ranks (each rank
keeps the slopes of its own query heads).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fuselm_runner
import toy_lm

V, H, NH, NKV, HD, I, LAYERS = 96, 32, 4, 2, 8, 64, 2
SLOPES = [0.9, 0.5, 0.25, 0.125]  # steep enough that a head given another head's slope changes the logits
PROMPT = [3, 14, 15, 92, 65, 35, 8, 9, 79, 32, 38, 46]


class Rms(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H) + 0.1 * torch.randn(H))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class AlibiAttn(nn.Module):
    reference = False  # True: plain torch attention (the oracle); False: the engine's op

    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(H, NH * HD, bias=False)
        self.k_proj = nn.Linear(H, NKV * HD, bias=False)
        self.v_proj = nn.Linear(H, NKV * HD, bias=False)
        self.o_proj = nn.Linear(NH * HD, H, bias=False)

    def forward(self, x):
        t = x.shape[1]
        q = self.q_proj(x).view(1, t, NH, HD).transpose(1, 2)
        k = self.k_proj(x).view(1, t, NKV, HD).transpose(1, 2)
        v = self.v_proj(x).view(1, t, NKV, HD).transpose(1, 2)
        if AlibiAttn.reference:
            k, v = (z.repeat_interleave(NH // NKV, dim=1) for z in (k, v))
            pos = torch.arange(t, dtype=torch.float32)
            s = q @ k.transpose(-1, -2) * HD ** -0.5 + torch.tensor(SLOPES)[:, None, None] * pos
            s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
            a = (F.softmax(s, -1) @ v).transpose(1, 2)
        else:
            from fuselm_capture import ops  # noqa: F401
            a = torch.ops.fuselm.attention(q, k, v, None, HD ** -0.5, -1, 0.0, self.layer_idx, -1, "causal", SLOPES)
        return self.o_proj(a.reshape(1, t, NH * HD))


class Layer(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Rms(), Rms()
        self.self_attn = AlibiAttn(idx)
        self.gate_proj, self.up_proj = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class AlibiLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Layer(i) for i in range(LAYERS)])
        self.norm = Rms()
        self.lm_head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed_tokens(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


@pytest.fixture(scope="module")
def alibi_lm(tmp_path_factory):
    torch.manual_seed(0)
    model = AlibiLM().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    out = tmp_path_factory.mktemp("alibi_lm")
    toy_lm.save_toy_lm(model, out, V)
    return model, out


def reference_logits(model, ids: list[int]) -> np.ndarray:
    AlibiAttn.reference = True
    try:
        with torch.no_grad():
            t = torch.tensor([ids])
            return model(t, torch.arange(len(ids)).unsqueeze(0))[0].numpy()
    finally:
        AlibiAttn.reference = False


def check_logits(model, result: dict, logits: np.ndarray, what: str):
    ids = PROMPT + result["token_ids"][:-1]
    ref = reference_logits(model, ids)
    assert logits.shape == ref.shape, (logits.shape, ref.shape)
    scale = float(np.abs(ref).max())
    diff = float(np.abs(logits - ref).max())
    assert diff <= 1e-4 * scale, f"{what}: max |logit diff| {diff:.3g} vs max|logit| {scale:.3g}"
    # the slopes matter: without them (or with another head's) the logits move far past the tolerance
    AlibiAttn.reference = True
    saved = list(SLOPES)
    try:
        SLOPES[:] = SLOPES[::-1]
        with torch.no_grad():
            other = model(torch.tensor([ids]), torch.arange(len(ids)).unsqueeze(0))[0].numpy()
    finally:
        SLOPES[:] = saved
        AlibiAttn.reference = False
    assert float(np.abs(other - ref).max()) > 100 * 1e-4 * scale


def test_alibi_op_matches_torch(alibi_lm, fuselm_bin, tmp_path):
    model, d = alibi_lm
    result, logits = fuselm_runner.generate(fuselm_bin, d, PROMPT, 6, tmp_path)
    check_logits(model, result, logits, "tp1")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is missing")
def test_alibi_slopes_shard_with_the_heads(alibi_lm, fuselm_bin, tmp_path):
    from test_tensor_parallel import inspect_tp, run_tp
    import test_tensor_parallel
    model, d = alibi_lm
    proc = inspect_tp(fuselm_bin, d, 2)
    assert proc.returncode == 0, proc.stderr
    assert "column parallel" in proc.stdout and "q:4x8->16" in proc.stdout, proc.stdout  # the heads are split
    saved = test_tensor_parallel.PROMPT
    test_tensor_parallel.PROMPT = PROMPT
    try:
        result, logits = run_tp(fuselm_bin, d, 2, tmp_path / "tp2")
    finally:
        test_tensor_parallel.PROMPT = saved
    check_logits(model, result, logits, "tp2")
