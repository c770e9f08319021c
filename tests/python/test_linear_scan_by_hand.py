"""Diagonal linear recurrences written inline token by token (python/fuselm_capture/recurrence_by_hand.py):
a loop whose rows are h[t] = a[t]·h[t-1] + b[t], a and b token-wide values of the graph, is proved
on probes and captured as one fuselm.linear_scan over every token count; a depthwise nn.Conv1d over
the tokens padded by K - 1 and cut to its first T outputs becomes causal_conv1d; sizes of the token
count baked into the fixed-length graphs (a reshape of the flattened tokens) are lifted back; what
is not provably that is refused in one line naming the module.

Toy: a language model around a gated loop written here (RG-LRU's shape, another program: gates by
per-head products of a reshape of the flattened tokens, the state reset where position_ids is 0).
The oracle of a capture is the toy's own eager forward: the captured graph, run with the reference
ops (hybrid_reference.py, loops from the ops' docstrings), must give its outputs at token counts
the fixed-length exports never saw. Refused: a convolution that looks ahead; in long mode a
saturating (tanh) recurrence and a scan from a learned nonzero start. In long mode also
recurrent_gemma (transformers, tiny random weights; 30 s on a loaded 2-core machine, over the
default budget): the captured graph run with the reference ops against transformers at 70 tokens
(the engine at 1, 7, 300 tokens and 300 in chunks of 64: test_hybrid_parity.py, long mode).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

import hybrid_models
import hybrid_reference
from refusals import loop_refusal

WIDTH, HEADS, VOCAB = 8, 2, 32
LONG = os.environ.get("FUSELM_LONG") == "1"


class GatedLoop(nn.Module):
    """how: "scan" (a = sigmoid of a per-head product, zero at position 0; b = the input times
    sqrt(1 - a²), the input itself at position 0; h = a·h + b token by token), "start" (the scan
    from a learned start instead of zeros), "tanh" (h = tanh(a·h + b))."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.gate = nn.Parameter(torch.randn(HEADS, WIDTH // HEADS, WIDTH // HEADS) * 0.5)
        self.start = nn.Parameter(torch.randn(WIDTH) * 0.5)

    def forward(self, x, position_ids):
        batch, T, _ = x.shape
        heads = x.reshape(batch * T, HEADS, WIDTH // HEADS).permute(1, 0, 2)
        a = torch.sigmoid(torch.bmm(heads, self.gate).permute(1, 0, 2).reshape(batch, T, WIDTH))
        reset = (position_ids == 0)[:, :, None]
        a = a * ~reset
        b = x * torch.where(reset, torch.ones_like(a), torch.sqrt(1 - a * a))
        out = torch.zeros_like(b)
        h = self.start[None].expand(batch, WIDTH) if self.how == "start" else torch.zeros(batch, WIDTH)
        for t in range(T):
            h = a[:, t].float() * h + b[:, t].float()
            if self.how == "tanh":
                h = torch.tanh(h)
            out[:, t] = h.to(out.dtype)
        return out


class ToyLM(nn.Module):
    """The loop after a causal depthwise convolution of width 3 (padded by 2, its first T outputs;
    how = "ahead": padded by 1 and read whole, a convolution that looks ahead)."""

    def __init__(self, how: str):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.conv = nn.Conv1d(WIDTH, WIDTH, 3, groups=WIDTH, padding=1 if how == "ahead" else 2)
        self.mix = GatedLoop("scan" if how == "ahead" else how)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids)
        x = self.conv(x.transpose(1, 2))[..., :input_ids.shape[1]].transpose(1, 2)
        return self.head(x + self.mix(x, position_ids))


def _capture(how: str):
    from fuselm_capture.capture import export_module
    torch.manual_seed(0)
    model = ToyLM(how).eval()
    dim = torch.export.Dim("num_tokens", min=2, max=64)
    example = {"input_ids": torch.zeros(1, 8, dtype=torch.long), "position_ids": torch.arange(8)[None]}
    return model, export_module(model, example, {"input_ids": {1: dim}, "position_ids": {1: dim}})


def test_a_gated_token_loop_is_captured_as_one_linear_scan_for_every_length():
    model, ep = _capture("scan")
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and str(n.target).startswith("fuselm.")]
    assert sorted(ops) == ["fuselm.causal_conv1d.default", "fuselm.linear_scan.default"], ops
    tok = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids")
    assert isinstance(tok.meta["val"].shape[1], torch.SymInt), "the token count was specialised"
    gm = ep.module()
    for T in (1, 3, 23, 40):  # neither fixed export's length (4, 7)
        ids = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(T))
        interp = hybrid_reference.ReferenceInterpreter(gm)
        with torch.no_grad():
            got, want = interp.run(ids, torch.arange(T)[None]), model(ids, torch.arange(T)[None])
        assert interp.ran == {"linear_scan": 1, "causal_conv1d": 1}, interp.ran
        err = float((got - want).abs().max())
        assert err <= 1e-5 * (1 + float(want.abs().max())), f"T={T}: off by {err:.3g}"


REFUSED = {
    "ahead": "conv (Conv1d): a convolution over the tokens (weight [8, 1, 3], padding [1], stride [1], groups 8) "
             "that is no causal depthwise convolution",
    # long mode (the default budget): a saturating recurrence, a scan that does not start from zeros
    # (as a fresh sequence's state does)
    "tanh": "not a linear scan: the decay its steps apply is neither of the token-wide values they read a row of",
    "start": "not a linear scan: the input its steps apply is neither of the token-wide values they read a row of",
}
LONG_REFUSED = ("tanh", "start")


def check_refused(how):
    msg = loop_refusal(lambda: _capture(how))
    assert REFUSED[how] in msg, msg
    if how != "ahead":
        assert "in module mix (GatedLoop)" in msg and "mix (GatedLoop): not a decayed softmax scan: " in msg, msg


@pytest.mark.parametrize("how", [h for h in REFUSED if h not in LONG_REFUSED])
def test_another_loop_or_convolution_is_refused_naming_its_module(how):
    check_refused(how)


@pytest.mark.skipif(not LONG, reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
@pytest.mark.parametrize("how", LONG_REFUSED)
def test_long_another_loop_is_refused_naming_its_module(how):
    check_refused(how)


@pytest.mark.skipif(not LONG, reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
def test_long_recurrent_gemma_graph_computes_what_transformers_computes(model_cache):
    """The graph capture makes (the production path), run with the reference ops and the
    checkpoint's weights, against transformers at 70 tokens: a linear scan and a causal convolution
    per recurrent layer, the sliding-window attention layer as fuselm.attention."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from fuselm_capture import capture, ops
    d = model_cache / "hybrid_recurrent_gemma"
    if not (d / "config.json").exists():
        hybrid_models.build("recurrent_gemma", d)
    ops.register_interfaces()
    config = AutoConfig.from_pretrained(d)
    _, _, ep = capture._build_and_export(config, {"attn_implementation": ops.ATTENTION_NAME, "dtype": torch.float32},
                                         config.max_position_embeddings)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    gm = ep.module()
    gm.load_state_dict(hf.state_dict(), strict=False, assign=True)
    for name, buf in hf.named_buffers():  # the buffers transformers computes at init (rope tables)
        owner, _, leaf = name.rpartition(".")
        if isinstance(getattr(gm.get_submodule(owner), leaf, None), torch.Tensor):
            setattr(gm.get_submodule(owner), leaf, buf)
    ids = torch.tensor([np.random.default_rng(1).integers(0, config.vocab_size, size=70).tolist()])
    interp = hybrid_reference.ReferenceInterpreter(gm)
    with torch.no_grad():
        got = interp.run(ids, torch.arange(70).unsqueeze(0))[0]
        want = hf(ids, use_cache=False).logits
    assert interp.ran == {"linear_scan": 2, "causal_conv1d": 2, "attention": 1}, interp.ran
    scale = float(want.abs().max())
    diff = float((got - want).abs().max())
    assert diff <= 1e-4 * scale, f"max |logit diff| {diff:.3g} (max |logit| {scale:.3g})"
