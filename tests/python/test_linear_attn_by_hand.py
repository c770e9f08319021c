"""Linear attention written inline (python/fuselm_capture/linear_attn_by_hand.py): a decay-masked,
softmax-free attention computed in blocks by a Python loop is proved on probes and captured as one
fuselm.ssd_scan over every token count; what is not that is refused in one line naming the module.

Toys: a language model around a blockwise linear attention module written here (its Q·Kᵀ masked by
a decay inside a block, a carried Kᵀ·V state between blocks, its decay slopes a buffer). The oracle
of a capture is the toy's own eager forward: the captured graph, run with the reference SSD scan
(hybrid_reference.py, a token loop from the op's docstring), must give its outputs at token counts
inside and beyond the bounded export's range. Refused: a softmax in the block, a decay that also
reaches later keys (not causal), a decay inside each block only (no carried state), a graph
that still depends on the bound outside the attention, and a checkpoint whose copy of a proved
buffer differs. And minimax (transformers 5.18, tiny random
weights) against transformers at a 7-token prompt; its long cases are in test_hybrid_parity.py.
"""
from __future__ import annotations

import math
import os

import pytest
import torch
from torch import nn

import hybrid_models
import hybrid_reference

H, D, WIDTH, BLOCK, VOCAB = 2, 4, 8, 4, 32
SLOPES = [0.5, 0.1]
SCALE = 0.5


class BlockLinearAttention(nn.Module):
    """out[t] = SCALE · Σ_{s<=t} exp(-slope_h·(t-s)) (q_t·k_s) v_s, computed in blocks of BLOCK
    tokens as lightning attention does. how: "decay" (that), "softmax" (a softmax in the block),
    "acausal" (exp(-slope·|t-s|) inside a block), "per_block" (no state carried between blocks),
    "table" (the decay, plus a per-position table up to BLOCK tokens: a branch on the length outside
    the attention)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.qkv = nn.Linear(WIDTH, 3 * H * D, bias=False)
        self.out = nn.Linear(H * D, WIDTH, bias=False)
        slopes = torch.tensor(SLOPES)[:, None, None]
        self.register_buffer("slopes", slopes)
        i = torch.arange(BLOCK)
        dist = (i[:, None] - i[None, :]).float()
        decay = torch.exp(-slopes * dist.abs()) if how == "acausal" else torch.exp(-slopes * dist) * (dist >= 0)
        self.register_buffer("decay", decay)
        self.register_buffer("table", torch.randn(BLOCK, WIDTH))  # "table": a per-position table of one block

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, H, 3 * D).split(D, dim=-1)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        state = torch.zeros(b, H, D, D)
        outs = []
        for i in range((t + BLOCK - 1) // BLOCK):
            start = i * BLOCK
            end = min(start + BLOCK, t)
            n = end - start
            qb, kb, vb = q[:, :, start:end], k[:, :, start:end], v[:, :, start:end]
            a = (qb @ kb.transpose(-1, -2)) * SCALE
            a = a.softmax(-1) if self.how == "softmax" else a * self.decay[:, :n, :n]
            pos = torch.arange(1, n + 1)[:, None]
            inter = ((qb * torch.exp(-self.slopes * pos)) @ state) * SCALE
            outs.append(a @ vb + (0 if self.how == "per_block" else inter))
            state = state * torch.exp(-self.slopes * n) + (kb * torch.exp(-self.slopes * (n - pos))).transpose(-1, -2) @ vb
        out = self.out(torch.cat(outs, dim=-2).transpose(1, 2).reshape(b, t, H * D))
        return out + self.table[:t] if self.how == "table" and t <= BLOCK else out


class ToyLM(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mixer = BlockLinearAttention(how)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        return self.head(x + self.mixer(x))


def export_toy(how: str, example: int = 3):
    """The toy's capture graph. An example of 3 tokens is one block; one of several blocks makes
    capture re-export the bounded graph from 2 tokens (torch keeps no bound from it)."""
    from fuselm_capture.capture import export_module
    torch.manual_seed(0)
    model = ToyLM(how).eval()
    tokens = torch.export.Dim("num_tokens", min=2, max=256)
    ep = export_module(model, {"input_ids": torch.zeros(1, example, dtype=torch.long)}, {"input_ids": {1: tokens}})
    return model, ep


def test_blockwise_decay_attention_becomes_one_ssd_scan_over_every_length(capfd):
    model, ep = export_toy("decay", example=6)
    scans = [n for n in ep.graph.nodes if n.op == "call_function" and str(n.target) == "fuselm.ssd_scan.default"]
    assert len(scans) == 1
    products = [n for n in ep.graph.nodes if n.op == "call_function" and "matmul" in str(n.target)]
    assert not products, [n.name for n in products]  # the block loop is gone
    ids_node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids")
    assert isinstance(ids_node.meta["val"].shape[1], torch.SymInt)
    line = capfd.readouterr().err
    assert "mixer (BlockLinearAttention): c=0.5 decay s=[0.5, 0.1]" in line, line
    interp_module = ep.module()
    for t in (3, 4, 37):  # inside the bounded range (one block), and many blocks beyond it
        ids = torch.randint(0, VOCAB, (1, t), generator=torch.Generator().manual_seed(t))
        with torch.no_grad():
            got = hybrid_reference.ReferenceInterpreter(interp_module).run(ids)
            want = model(ids)
        got = got[0] if isinstance(got, (tuple, list)) else got
        assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max()), t


@pytest.mark.parametrize("how,why", [
    ("softmax", "is not (D ∘ Q·Kᵀ)·V with one causal decay"),
    ("acausal", "is not (D ∘ Q·Kᵀ)·V with one causal decay"),
    ("per_block", "at 11 tokens it is off by"),
])
def test_other_blockwise_forms_are_refused_naming_the_module(how, why):
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        export_toy(how)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "(not linear attention: mixer (BlockLinearAttention): " in msg, msg
    assert why in msg, msg


def test_a_bound_left_outside_the_attention_is_refused():
    """The attention is proved and rewritten, but the bounded graph took a branch on the length
    outside it (a table of one block added up to BLOCK tokens): the export over the full range
    fails, and capture says so."""
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        export_toy("table")
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "(not linear attention: after rewriting mixer (BlockLinearAttention) the graph still depends on the " \
           f"bound of {BLOCK} tokens: " in msg, msg


def test_a_checkpoint_copy_of_a_proved_buffer_must_agree(tmp_path):
    from safetensors.torch import save_file

    from fuselm_capture.linear_attn_by_hand import check_checkpoint_buffers
    used = torch.tensor([0.5, 0.1])
    found = {"m.slopes": {"keys": ["m.slopes"]}}
    ckpt = {"m.slopes": {"file": "model.safetensors"}}
    save_file({"m.slopes": used.clone()}, str(tmp_path / "model.safetensors"))
    check_checkpoint_buffers({"m.slopes": used}, found, ckpt, tmp_path)
    save_file({"m.slopes": used.to(torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    check_checkpoint_buffers({"m.slopes": used}, found, ckpt, tmp_path)  # agrees to bf16 rounding
    save_file({"m.slopes": used * 1.01}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="checkpoint tensor m.slopes differs from the m.slopes"):
        check_checkpoint_buffers({"m.slopes": used}, found, ckpt, tmp_path)


def test_expected_is_a_decayed_causal_sum():
    """The proof's reference, against a plain double loop."""
    from fuselm_capture.linear_attn_by_hand import expected
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 3, generator=g, dtype=torch.float64) for _ in range(3))
    s = torch.tensor([0.3, 0.0])
    got = expected(q, k, v, 2.0, s)
    for h in range(2):
        for i in range(5):
            want = sum(2.0 * math.exp(-float(s[h]) * (i - j)) * float(q[0, h, i] @ k[0, h, j]) * v[0, h, j]
                       for j in range(i + 1))
            assert torch.allclose(got[0, h, i], want)


def test_minimax_prompt_parity(fuselm_bin, model_cache, tmp_path):
    from parity import check_parity, hf_model
    d = model_cache / "hybrid_minimax"
    if not (d / "config.json").exists():
        hybrid_models.build("minimax", d)
    model = hf_model(d)
    prompt = [int(x) for x in torch.randint(0, model.config.vocab_size, (7,), generator=torch.Generator().manual_seed(7))]
    worst = check_parity("hybrid_minimax/7", fuselm_bin, d, prompt, tmp_path, max_tokens=8, model=model)
    print(f"\nminimax: max relative logit difference {worst:.2e}")


@pytest.mark.skipif(os.environ.get("FUSELM_LONG") != "1", reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
def test_long_minimax_checkpoint_with_other_decays_is_refused(tmp_path):
    """The checkpoint holds the decay buffers the model loads: one that differs from the values
    the proof used (recomputed from the config) is refused, naming the tensor."""
    from safetensors.torch import load_file, save_file

    from fuselm_capture.capture import CaptureError, capture_model_dir
    d = hybrid_models.build("minimax", tmp_path / "m")
    tensors = load_file(str(d / "model.safetensors"))
    key = next(k for k in tensors if k.endswith("slope_rate"))
    tensors[key] = tensors[key] * 1.5
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CaptureError) as err:
        capture_model_dir(d, tmp_path / "ir")
    msg = str(err.value)
    assert f"checkpoint tensor {key} differs from the {key} the linear attention was proved with" in msg, msg
