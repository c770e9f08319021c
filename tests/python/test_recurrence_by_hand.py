"""Recurrences written inline token by token (python/fuselm_capture/recurrence_by_hand.py): a
per-channel decayed softmax over the past, computed by a Python loop over the tokens, is proved on
probes and captured as one fuselm.decay_softmax_scan over every token count; a token shift (a zero
pad at the front of the tokens, the end cut) becomes a causal convolution; what is not provably
that is refused in one line naming the module.

Toys: a language model around a token-loop module written here (a plain softmax over the past,
no running maximum: another program than transformers' for the same function). The oracle of a
capture is the toy's own eager forward: the captured graph, run with the reference ops
(hybrid_reference.py, loops from the ops' docstrings), must give its outputs at token counts the
fixed-length exports never saw. Refused: a gated moving average (neither the softmax scan nor a linear scan of
token-wide values: its decay is computed inside the loop), a
pad of the tokens that is no causal shift (it would mix the batch's sequences), a branch on the
length outside the loop that neither fixed length takes; in long mode also a step reading a third
token-wide tensor and a forward changing a weight in place other than by a scale. And rwkv
(transformers, tiny random weights, its layers rescaled by the forward: rescale_every 1, the scaled
weights values of the graph): the captured graph run with the reference ops against transformers
at 70 tokens; in long mode the engine against transformers at a 7-token prompt (the unrescaled
family at 1, 7, 300 tokens and 300 in chunks of 64: test_hybrid_parity.py).
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

WIDTH, VOCAB = 8, 32


class TokenLoop(nn.Module):
    """how: "softmax" (out[t] = softmax over s <= t of k[s] + (t-1-s)·w, k[t] + u for s = t, of
    v), "ema" (h = a·h + (1-a)·v, a = sigmoid(k[t] + a parameter): a gated moving average),
    "third" (the softmax, its values times a gate row read inside the loop), "mutates" (the
    softmax, and the output weight shifted in place by every forward)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.kvg = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.decay = nn.Parameter(torch.randn(WIDTH) * 0.5)
        self.bonus = nn.Parameter(torch.randn(WIDTH) * 0.5)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x):
        if self.how == "mutates":
            with torch.no_grad():
                self.out.weight.add_(0.1)
        k, v, gate = self.kvg(x).split(WIDTH, dim=-1)
        w = -torch.exp(self.decay)
        out = torch.zeros_like(v)
        num = torch.zeros_like(v[:, 0])
        den = torch.zeros_like(v[:, 0])
        h = torch.zeros_like(v[:, 0])
        for t in range(x.shape[1]):
            if self.how == "ema":
                a = torch.sigmoid(k[:, t] + self.decay)
                h = a * h + (1 - a) * v[:, t]
                out[:, t] = h
                continue
            e = torch.exp(k[:, t] + self.bonus)
            val = v[:, t] * torch.sigmoid(gate[:, t]) if self.how == "third" else v[:, t]
            out[:, t] = (num + e * val) / (den + e)
            num = torch.exp(w) * num + torch.exp(k[:, t]) * val
            den = torch.exp(w) * den + torch.exp(k[:, t])
        return self.out(out)


class ToyLM(nn.Module):
    """The loop between an embedding and a head, its input mixed with the previous token's (or,
    how = "ahead", the next token's: a pad of the tokens that is no causal shift; how = "branch":
    the embedding doubled beyond 32 tokens, a branch on the length outside the loop)."""

    def __init__(self, how: str):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.how = how
        self.mix = TokenLoop("softmax" if how in ("ahead", "branch") else how)
        self.shift = nn.ZeroPad2d((0, 0, -1, 1) if how == "ahead" else (0, 0, 1, -1))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        if self.how == "branch" and input_ids.shape[1] > 32:  # neither fixed length (4, 7) takes it
            x = 2 * x
        x = x + self.mix(x + 0.5 * self.shift(x))
        return self.head(x)


def _capture(how: str):
    from fuselm_capture.capture import export_module
    torch.manual_seed(0)
    model = ToyLM(how).eval()
    dim = torch.export.Dim("num_tokens", min=2, max=64)
    return model, export_module(model, {"input_ids": torch.zeros(1, 8, dtype=torch.long)},
                                {"input_ids": {1: dim}})


def test_a_token_loop_softmax_is_captured_as_one_scan_for_every_length():
    model, ep = _capture("softmax")
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and str(n.target).startswith("fuselm.")]
    assert sorted(ops) == ["fuselm.causal_conv1d.default", "fuselm.decay_softmax_scan.default"], ops
    tok = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids")
    assert isinstance(tok.meta["val"].shape[1], torch.SymInt), "the token count was specialised"
    gm = ep.module()
    for T in (1, 3, 23, 40):  # neither fixed export's length (4, 7)
        ids = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(T))
        interp = hybrid_reference.ReferenceInterpreter(gm)
        with torch.no_grad():
            got, want = interp.run(ids), model(ids)
        assert interp.ran == {"decay_softmax_scan": 1, "causal_conv1d": 1}, interp.ran
        err = float((got - want).abs().max())
        assert err <= 1e-5 * (1 + float(want.abs().max())), f"T={T}: off by {err:.3g}"


REFUSED = {
    "ema": "its steps apply is none of the per-channel values they read",
    "ahead": "shift (ZeroPad2d): pads the tokens by [0, 0, -1, 1] (constant, 0.0), which is no token shift",
    "branch": "with the loops of mix cut to one step, the forward still fixes the length",
    # long mode (the default budget): two more ways a loop is not the scan
    "third": "read rows of 3 token-wide tensors, not two",
    "mutates": "its forward changes parameter mix.out.weight in place (aten.add_.Tensor)",
}
LONG_REFUSED = ("third", "mutates")


def check_refused(how):
    msg = loop_refusal(lambda: _capture(how))
    assert "in module mix (TokenLoop)" in msg, msg
    assert REFUSED[how] in msg, msg


@pytest.mark.parametrize("how", [h for h in REFUSED if h not in LONG_REFUSED])
def test_another_token_loop_is_refused_naming_its_module(how):
    check_refused(how)


@pytest.mark.skipif(os.environ.get("FUSELM_LONG") != "1", reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
@pytest.mark.parametrize("how", LONG_REFUSED)
def test_long_another_token_loop_is_refused_naming_its_module(how):
    check_refused(how)


def rwkv_rescaled(model_cache):
    """A tiny rwkv with two layers rescaled by the forward (rescale_every 1: output and value
    weights of block i divided by 2^i at the first forward in eval mode)."""
    d = model_cache / "rwkv_rescaled"
    if not (d / "config.json").exists():
        cls, overrides = hybrid_models.HYBRID_FAMILIES["rwkv"]
        hybrid_models.HYBRID_FAMILIES["rwkv_rescaled"] = (cls, dict(overrides, rescale_every=1, num_hidden_layers=2))
        try:
            hybrid_models.build("rwkv_rescaled", d)
        finally:
            del hybrid_models.HYBRID_FAMILIES["rwkv_rescaled"]
    return d


def test_rwkv_graph_computes_what_transformers_computes(model_cache):
    """The graph capture makes (the production path), run with the reference ops and the
    checkpoint's weights, against transformers at 70 tokens: one scan per layer, two shifts."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from fuselm_capture import capture, ops
    d = rwkv_rescaled(model_cache)
    ops.register_interfaces()
    config = AutoConfig.from_pretrained(d)
    _, _, ep = capture._build_and_export(config, {"attn_implementation": ops.ATTENTION_NAME, "dtype": torch.float32},
                                         config.max_position_embeddings)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    gm = ep.module()
    gm.load_state_dict(hf.state_dict(), strict=False, assign=True)  # before hf's forward rescales its weights
    ids = torch.tensor([np.random.default_rng(1).integers(0, config.vocab_size, size=70).tolist()])
    interp = hybrid_reference.ReferenceInterpreter(gm)
    with torch.no_grad():
        got = interp.run(ids, torch.arange(70).unsqueeze(0))[0]
        want = hf(ids, use_cache=False).logits
    assert interp.ran == {"decay_softmax_scan": 2, "causal_conv1d": 4}, interp.ran
    scale = float(want.abs().max())
    diff = float((got - want).abs().max())
    assert diff <= 1e-4 * scale, f"max |logit diff| {diff:.3g} (max |logit| {scale:.3g})"


@pytest.mark.skipif(os.environ.get("FUSELM_LONG") != "1", reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
def test_long_rwkv_rescaled_matches_transformers_at_7_tokens(fuselm_bin, model_cache, tmp_path):
    """The engine on the rescaled rwkv (its unrescaled three layers: test_hybrid_parity.py)."""
    from parity import check_parity, hf_model
    d = rwkv_rescaled(model_cache)
    model = hf_model(d)
    prompt = [int(x) for x in np.random.default_rng(7).integers(0, model.config.vocab_size, size=7)]
    worst = check_parity("rwkv_rescaled/7", fuselm_bin, d, prompt, tmp_path, max_tokens=8, model=model)
    print(f"\nrwkv (rescaled layers): max relative logit difference {worst:.2e}")
