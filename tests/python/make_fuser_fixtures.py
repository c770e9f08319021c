"""Writes the captured toy modules that tests/cpp/fusers_test.cc reads (tests/cpp/data/fusers/).

Each fixture is the ir.json of one toy of tests/python/test_fusers.py captured through the normal
capture path (test_fusers.capture_toy: x [1, T, 32] with T dynamic, the block under `block` or a
toy's own children): the RMSNorm variants and non-RMSNorms, the GLU variants and rejections, QKV
(v/k/q order with an extra projection, q/k norms per head and over the whole width, packed MQA,
per-head split), rotary embeddings (rotate_half on the whole head and on a partial slice, the
wrong half negated, GPT-J's interleaved pairs), tanh soft-capping (one and two sites, another
factor, the tanh or the quotient read elsewhere), the attention scale cases and layer-index cases. The fixtures edited after
capture: the unresolvable scale: torch.export specializes Python-float scales, so the scale
argument a capture could not resolve is written as None, as test_fusers.py does; and the index
errors' fixtures carry their modules' layer_idx in the op (capture numbers the calls in graph order).
Regenerate after an IR or capture change: python tests/python/make_fuser_fixtures.py
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

from torch import nn  # noqa: E402

import test_fusers as t  # noqa: E402

OUT = HERE.parents[1] / "tests" / "cpp" / "data" / "fusers"


def null_scale(ir: dict) -> None:
    for n in ir["nodes"]:
        if n["op"] == "fuselm.attention.default":
            n["args"][4] = None


def layers_from_modules(ir: dict) -> None:
    """Each attention op's layer index set to its module's layer_idx attribute (capture numbers the
    calls in graph order): the IRs of the index errors, two modules with one index or a gap."""
    for n in ir["nodes"]:
        if n["op"] == "fuselm.attention.default":
            n["args"][7] = ir["modules"][n["module_stack"][-1]]["attributes"]["layer_idx"]


# name -> (module factory, extra inputs, IR edit)
CASES = {
    "rms_llama": (lambda: t.Wrap(t.RmsLlama()), (), None),
    "rms_gemma": (lambda: t.Wrap(t.RmsGemma()), (), None),
    "rms_no_weight": (lambda: t.Wrap(t.RmsNoWeight()), (), None),
    "rms_no_cast": (lambda: t.Wrap(t.RmsNoCast()), (), None),
    "rms_two_eps": (lambda: t.TwoRms(), (), None),
    "rms_hand_layer_norm": (lambda: t.Wrap(t.HandLayerNorm()), (), None),
    "rms_torch_layer_norm": (lambda: t.Wrap(nn.LayerNorm(t.H)), (), None),
    "rms_gated_before": (lambda: t.Wrap(t.GatedRmsBefore()), ("gate",), None),
    "rms_gated_after": (lambda: t.Wrap(t.GatedRmsAfter()), ("gate",), None),
    "glu_silu": (lambda: t.Wrap(t.Glu()), (), None),
    "glu_reversed": (lambda: t.Wrap(t.Glu(reverse=True)), (), None),
    "glu_no_down": (lambda: t.Wrap(t.Glu(down=False)), (), None),
    "glu_gelu": (lambda: t.Wrap(t.Glu(act="gelu")), (), None),
    "glu_gelu_tanh_bias": (lambda: t.Wrap(t.Glu(act="gelu_tanh", bias=True)), (), None),
    "glu_conv1d": (lambda: t.Wrap(t.GluConv1D()), (), None),
    "glu_dropout": (lambda: t.Wrap(t.Glu(act="dropout")), (), None),
    "glu_bilinear": (lambda: t.Wrap(t.Glu(act="none")), (), None),
    "glu_plain_mlp": (lambda: t.Wrap(t.PlainMlp()), (), None),
    "qkv_vkq_extra": (lambda: t.Wrap(t.NamedAttn(t.CONVENTIONAL, 0)), (), None),
    "qkv_norm_per_head": (lambda: t.Wrap(t.NormedAttn(per_head=True)), (), None),
    "qkv_norm_full_width": (lambda: t.Wrap(t.NormedAttn(per_head=False)), (), None),
    "qkv_mqa_packed": (lambda: t.Wrap(t.MqaPacked()), (), None),
    "qkv_per_head_split": (lambda: t.Wrap(t.PerHeadPacked()), (), None),
    "rope_half": (lambda: t.Wrap(t.Rope("half")), (), None),
    "rope_partial": (lambda: t.Wrap(t.Rope("partial")), (), None),
    "rope_wrong_half": (lambda: t.Wrap(t.Rope("wrong_half")), (), None),
    "rope_interleaved": (lambda: t.Wrap(t.Rope("interleaved")), (), None),
    "softcap_gemma2": (lambda: t.Wrap(t.Softcap("gemma2")), (), None),
    "softcap_two": (lambda: t.Wrap(t.Softcap("two")), (), None),
    "softcap_other_factor": (lambda: t.Wrap(t.Softcap("other_factor")), (), None),
    "softcap_tanh_shared": (lambda: t.Wrap(t.Softcap("tanh_shared")), (), None),
    "softcap_div_shared": (lambda: t.Wrap(t.Softcap("div_shared")), (), None),
    "attn_scale_opt": (lambda: t.Wrap(t.ScaledAttn("opt")), (), None),
    "attn_scale_gemma2": (lambda: t.Wrap(t.ScaledAttn("gemma2")), (), None),
    "attn_scale_yarn": (lambda: t.Wrap(t.ScaledAttn("yarn")), (), None),
    "attn_scale_unresolvable": (lambda: t.AttnStack([0]), (), null_scale),
    "attn_longcat": (lambda: t.AttnStack([0, 1, 2, 3]), (), None),
    "attn_duplicate": (lambda: t.AttnStack([0, 0]), (), layers_from_modules),
    "attn_missing": (lambda: t.AttnStack([0, 2]), (), layers_from_modules),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (make, inputs, edit) in CASES.items():
        with tempfile.TemporaryDirectory() as d:
            t.torch.manual_seed(0)  # the toys draw their weights at construction
            d = t.capture_toy(make(), Path(d), inputs)
            text = (d / "fuselm-ir" / "ir.json").read_text()
            if edit is not None:
                ir = json.loads(text)
                edit(ir)
                text = json.dumps(ir)
            (OUT / f"{name}.json").write_text(text)
    for p in sorted(OUT.glob("*.json")):
        print(p.relative_to(HERE.parents[1]), p.stat().st_size)


if __name__ == "__main__":
    main()
