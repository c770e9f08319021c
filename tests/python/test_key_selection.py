"""Sparse attention's top-k key selection is proved to be every key, bounds the context, or is refused.

A toy attention layer shaped like DeepSeek Sparse Attention's: an indexer scores every key for
every query under the mask it reads as a tensor (`attention_mask[:, 0]`), and the attention call
gets the top-k positions (python/fuselm_capture/key_selection.py). The assertions are on the
exported graph: when k is the key count (or Min(K, key count)) the selection and the whole indexer
are gone and the context bound is K; any other selection, and a mask tensor the model computes
with, is a capture error naming the module. DSA families' logits against transformers:
test_moe.py (deepseek_v32, glm_moe_dsa).
"""
from __future__ import annotations

import pytest
import torch

from fuselm_capture import ops
from fuselm_capture.capture import CaptureError, export_module
from fuselm_capture.masks import MaskKind


class SparseToy(torch.nn.Module):
    """One attention call over a single head of 8; `keep(scores, T)` gives the top-k's k."""

    def __init__(self, keep, selection="topk", mask_into_output=False):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24, bias=False)
        self.index_q = torch.nn.Linear(8, 8, bias=False)
        self.index_k = torch.nn.Linear(8, 8, bias=False)
        self.keep, self.selection, self.mask_into_output = keep, selection, mask_into_output

    def forward(self, x):
        t = x.shape[1]
        mask = MaskKind("causal", _shape=(1, t, t, x.device))
        q, k, v = (h.view(1, t, 1, 8).transpose(1, 2) for h in self.qkv(x).split(8, dim=-1))
        scores = self.index_q(x) @ self.index_k(x).transpose(1, 2)  # [1, T, T]
        scores = scores + mask[:, 0, :, :]  # the additive float mask (0 or -inf)
        if self.selection == "topk":
            picked = scores.topk(self.keep(t), dim=-1).indices.to(torch.int32)
        else:  # positions computed without a top-k
            picked = torch.arange(t, device=x.device).expand(1, t, t).to(torch.int32)
        out, _ = ops.attention_forward(self, q, k, v, mask, indices=picked)
        out = out.reshape(1, t, 8)
        if self.mask_into_output:
            out = out + mask[:, 0, :, :].sum(-1, keepdim=True).to(out.dtype)
        return out


def _export(toy, max_tokens=1024):
    ops.register_interfaces()
    # From 3 tokens: a top-k of T - 1 keys needs T - 1 >= 1 (torch guards it otherwise).
    tokens = torch.export.Dim("num_tokens", min=3, max=max_tokens)
    return export_module(toy, {"x": torch.randn(1, 8, 8)}, {"x": {1: tokens}})


def _targets(ep) -> set[str]:
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


def test_a_top_k_of_every_key_is_dropped_with_its_indexer():
    ep = _export(SparseToy(keep=lambda t: t))
    targets = _targets(ep)
    assert "fuselm.attention.default" in targets
    assert not any("topk" in t or "mask_tensor" in t for t in targets), targets
    attn = next(n for n in ep.graph.nodes if str(n.target) == "fuselm.attention.default")
    assert attn.args[11:] == () or attn.args[11] is None
    assert ep.fuselm_dense_context == 1 << 62  # every key at every length
    params = {s.target for s in ep.graph_signature.input_specs if s.target}
    read = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
    assert any("qkv" in p for p in params) and not any(n.startswith("p_index") for n in read), read


def test_min_of_a_width_and_the_key_count_bounds_the_context_at_that_width():
    """transformers' `min(index_topk, kv_length)`: every key up to index_topk keys, so the context
    is index_topk (here 100 of a range up to 1024)."""
    ep = _export(SparseToy(keep=lambda t: min(100, t)))
    assert ep.fuselm_dense_context == 100
    assert not any("topk" in t for t in _targets(ep))


@pytest.mark.parametrize("toy, why", [
    (SparseToy(keep=lambda t: t - 1), r"its top-k keeps s\d+ - 1 of s\d+ keys"),
    (SparseToy(keep=lambda t: t, selection="arange"), "its key selection is not the indices of a top-k"),
])
def test_a_selection_capture_cannot_prove_every_key_is_refused_by_module(toy, why):
    with pytest.raises(CaptureError, match=r"attention in module .*SparseToy.* attends to selected keys only \(" + why):
        _export(toy)


def test_a_mask_tensor_the_model_computes_with_is_refused():
    with pytest.raises(CaptureError, match=r"reads its attention mask as a tensor \(indexed\) and computes with it"):
        _export(SparseToy(keep=lambda t: t, mask_into_output=True))


def test_a_mask_kind_without_a_shape_is_still_refused_when_indexed():
    from fuselm_capture.masks import MaskReadAsTensor
    with pytest.raises(MaskReadAsTensor, match="indexed"):
        MaskKind("causal")[:, 0]
    assert not hasattr(MaskKind("causal", _shape=(1, 2, 2, "meta")), "shape")


def test_comparing_a_mask_kind_with_a_number_is_refused_and_mask_kinds_compare_by_kind():
    """`attention_mask == 0` (Qwen4-Exp's QSA indexer) is the model computing with its mask: a
    named refusal, not object equality's False. Two masks of one kind are equal whatever shape
    transformers asked them for."""
    from fuselm_capture.masks import MaskReadAsTensor
    shaped = MaskKind("causal", _shape=(1, 4, 4, "meta"))
    with pytest.raises(MaskReadAsTensor, match="== 0"):
        shaped == 0  # noqa: B015
    assert shaped == MaskKind("causal") and shaped != MaskKind("sliding", 16)
    assert len({shaped, MaskKind("causal")}) == 1
