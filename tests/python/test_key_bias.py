"""A mask the model builds as a per-key score bias under its causal mask is folded into the keys.

Doge hands attention a mask it built: a bias per key and key head (from the key's value states),
broadcast over the queries, filled with the dtype's minimum where the causal mask hides a key, and
repeated over each key head's query heads. python/fuselm_capture/key_bias.py reads it back to the
causal mask plus that bias and computes it as [q, 1/s]·[k, b]·s in plain attention. Toys check the
exported graph and every refusal (each names the module); Doge (tiny, with biases that move the
logits) checks the engine's logits and tokens against transformers.
"""
from __future__ import annotations

import pytest
import torch

import parity
import tiny_models
from fuselm_capture import ops
from fuselm_capture.capture import CaptureError, export_module
from fuselm_capture.masks import MaskKind

MIN = torch.finfo(torch.float32).min


class BiasToy(torch.nn.Module):
    """Two query heads over one key head of 8; `variant` breaks one part of the bias mask."""

    def __init__(self, variant="per_key"):
        super().__init__()
        self.q = torch.nn.Linear(8, 16, bias=False)
        self.kv = torch.nn.Linear(8, 16, bias=False)
        self.dt = torch.nn.Linear(8, 1, bias=False)
        self.variant = variant

    def forward(self, x):
        t = x.shape[1]
        mask = MaskKind("causal", _shape=(1, t, t, x.device))
        q = self.q(x).view(1, t, 2, 8).transpose(1, 2)
        k, v = (h.view(1, t, 1, 8).transpose(1, 2) for h in self.kv(x).split(8, dim=-1))
        bias = torch.exp(self.dt(x)).transpose(1, 2)  # [1, 1, T]: one value per key
        if self.variant == "per_query":
            scores = bias[:, :, :, None] * bias[:, :, None, :]  # [1, 1, T, T]: varies with the query
        else:
            scores = bias[:, :, None, :].expand(-1, -1, t, -1)
        hidden = mask[:, :, :, :t] != 0
        if self.variant == "inverted":
            hidden = mask[:, :, :, :t] == 0
        filled = scores.masked_fill(hidden, 0.0 if self.variant == "zero_fill" else MIN)
        heads = 2 if self.variant == "per_query_head" else 1
        if heads == 2:  # a bias per query head over the one key head: no key carries it
            filled = torch.cat([filled, filled * 2], dim=1)
        else:  # transformers' repeat_kv
            filled = filled[:, :, None].expand(1, 1, 2, t, t).reshape(1, 2, t, t)
        out, _ = ops.attention_forward(self, q, k, v, filled)
        return out.reshape(1, t, 16)


def _export(toy):
    ops.register_interfaces()
    tokens = torch.export.Dim("num_tokens", min=2, max=1024)
    return export_module(toy, {"x": torch.randn(1, 8, 8)}, {"x": {1: tokens}})


def test_a_per_key_bias_becomes_one_more_key_column():
    ep = _export(BiasToy())
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert not any("mask_tensor" in t or "attention_tensor_mask" in t or "masked_fill" in t for t in targets), targets
    attn = next(n for n in ep.graph.nodes if str(n.target) == "fuselm.attention.default")
    q, k = attn.args[0].meta["val"], attn.args[1].meta["val"]
    assert q.shape[1] == 2 and k.shape[1] == 1 and q.shape[-1] == 9 and k.shape[-1] == 9
    assert attn.args[9] == "causal" and attn.args[5] == -1


@pytest.mark.parametrize("variant, why", [
    ("per_query", "its bias is not one value per key broadcast over the queries"),
    ("zero_fill", "it fills hidden keys with 0.0, not the dtype's minimum"),
    ("inverted", "its hidden keys are not where the model's mask is nonzero"),
    ("per_query_head", "it is not a bias filled where the mask hides a key"),
])
def test_a_mask_tensor_capture_cannot_read_is_refused_by_module(variant, why):
    with pytest.raises(CaptureError, match=r"attention in module .*BiasToy.* was given a mask tensor the model built "
                                           r"itself \(" + why):
        _export(BiasToy(variant))


def test_doge_per_key_bias_against_transformers(fuselm_bin, model_cache, tmp_path):
    """Doge with its dynamic-mask scale A drawn wide, so that the bias moves the logits (checked
    against the same model with A = 0, where the bias is 1 for every key and cancels)."""
    from transformers import AutoModelForCausalLM
    model_dir = model_cache / "doge_key_bias"
    if not (model_dir / "config.json").exists():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(tiny_models.make_config("doge"), dtype=torch.float32)
        tiny_models.randomize(model, 0.15)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("self_attn.A"):
                    p.copy_(torch.randn_like(p) * 1.5)
        model.save_pretrained(model_dir)
    model = parity.hf_model(model_dir)
    prompt = _ids(40, model.config.vocab_size, seed=5)
    flat = parity.hf_model(model_dir)
    with torch.no_grad():
        for name, p in flat.named_parameters():
            if name.endswith("self_attn.A"):
                p.zero_()
    with_bias, without = parity.hf_logits(model, prompt), parity.hf_logits(flat, prompt)
    assert abs(with_bias - without).max() > 0.05 * abs(with_bias).max()  # the bias matters here
    for length in (7, 300):
        parity.check_parity(f"doge_key_bias/{length}", fuselm_bin, model_dir,
                            _ids(length, model.config.vocab_size, seed=length), tmp_path, model=model)


def _ids(length: int, vocab: int, seed: int) -> list[int]:
    return [int(x) for x in torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed))]
