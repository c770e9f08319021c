"""Mixture-of-experts parity with transformers (the oracle) on tiny random-weight models.

Each family in moe_models.MOE_FAMILIES runs with fp32 weights for prompts of 1, 7 and 300 tokens:
fuselm's greedy 32 tokens equal transformers' greedy decoding and every logits row is within
1e-3 x max|logit| (parity.check_parity; true ties are counted and printed). The experts run in
the engine's fuselm.experts op, the routers as the captured ATen ops. Also: per-expert checkpoint
tensors stacked at load, bf16 expert weights, and experts-module capture checks.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import family_status
import long_mode
import fuselm_runner
import moe_models
from parity import TIES, check_parity, hf_logits, hf_model

# Prompt lengths per case: every family runs the 7-token prompt; 1 and 300 tokens in long mode.
LENGTHS = {"7": [7], "1_300": [1, 300]}

# Families whose attention needs ops the MoE work does not add (DeepSeek's MLA builds its key with
# new_empty + copy_, DeepSeek-V2's rope is complex-valued); they run once those ops exist (with the
# MLA branch's copy_/new_empty borrowed, deepseek_v3 passed here at 1.8e-06).
NEEDS_OTHER_OPS = {"deepseek_v3": "MLA key assembly (aten.copy_)", "deepseek_v2": "complex rope (aten.polar)"}


def prompt_of(length: int, vocab: int, seed: int) -> list[int]:
    g = np.random.default_rng(seed)
    return [int(x) for x in g.integers(0, vocab, size=length)]


def model_dir_of(family: str, model_cache, dtype=torch.float32):
    d = model_cache / (family if dtype == torch.float32 else f"{family}_{dtype}".replace("torch.", ""))
    if not (d / "config.json").exists():
        moe_models.build(family, d, dtype=dtype)
    return d


def missing_op(fuselm_bin, model_dir, tmp_path) -> str | None:
    """The op the engine lacks for this model, if that is why it cannot run."""
    import subprocess
    proc = subprocess.run([str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", "1", "--max-tokens", "1",
                           "--json"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "is not implemented by the engine" in proc.stderr:
        return proc.stderr.strip().splitlines()[-1]
    return None


# The default run: the 7-token prompt of the families whose routers and experts differ most
# (softmax then top-k, top-k then softmax, grouped top-k with a bias, experts with biases, Llama 4's
# sigmoid top-1 with its shared expert), and GLM's sparse attention (DSA) with a shared-selection
# layer; long mode: all.
@pytest.mark.parametrize("lengths", long_mode.split(LENGTHS, default=["7"]))
@pytest.mark.parametrize("family", long_mode.split(family_status.params(moe_models.MOE_FAMILIES),
                                                   default=["qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss",
                                                            "glm4_moe_grouped", "llama4_text", "glm_moe_dsa"]))
def test_moe_family_parity(family, lengths, fuselm_bin, model_cache, tmp_path):
    model_dir = model_dir_of(family, model_cache)
    if family in NEEDS_OTHER_OPS:
        lacking = missing_op(fuselm_bin, model_dir, tmp_path)
        if lacking:
            pytest.skip(f"{family} needs {NEEDS_OTHER_OPS[family]}: {lacking}")
    vocab = moe_models.make_config(family).vocab_size
    model = hf_model(model_dir)
    worst = 0.0
    for length in LENGTHS[lengths]:
        worst = max(worst, check_parity(f"{family}/{length}", fuselm_bin, model_dir,
                                        prompt_of(length, vocab, seed=length), tmp_path, model=model))
    print(f"\n{family}: max relative logit difference {worst:.2e}; ties accepted: "
          f"{sum(v for k, v in TIES.items() if k.startswith(family + '/'))}")


def test_per_expert_checkpoint_is_stacked(model_cache):
    """save_pretrained writes one tensor per expert; capture records how they stack."""
    model_dir = model_dir_of("qwen3_moe", model_cache)
    from fuselm_capture.capture import capture_model_dir
    ir = json.loads(capture_model_dir(model_dir).read_text())
    cfg = moe_models.make_config("qwen3_moe")
    entry = ir["parameters"]["model.layers.0.mlp.experts.gate_up_proj"]["checkpoint"]
    assert entry["stack"] == {"experts": cfg.num_experts, "parts": 2, "concat_dim": 1}
    assert entry["keys"][:3] == ["model.layers.0.mlp.experts.0.gate_proj.weight",
                                 "model.layers.0.mlp.experts.0.up_proj.weight",
                                 "model.layers.0.mlp.experts.1.gate_proj.weight"]
    # experts.10 sorts before experts.2 as text; the stack must be in expert order
    assert entry["keys"][-1] == f"model.layers.0.mlp.experts.{cfg.num_experts - 1}.up_proj.weight"
    down = ir["parameters"]["model.layers.0.mlp.experts.down_proj"]["checkpoint"]
    assert down["stack"] == {"experts": cfg.num_experts, "parts": 1, "concat_dim": None}


def test_experts_op_arguments(model_cache):
    """The experts op carries the gating function read from the module: silu for Qwen3-MoE, the
    clamped SwiGLU over interleaved halves with gpt-oss's alpha and limit, biases and transposed."""
    from fuselm_capture.capture import capture_model_dir
    args = {}
    for family in ("qwen3_moe", "gpt_oss"):
        ir = json.loads(capture_model_dir(model_dir_of(family, model_cache)).read_text())
        node = next(n for n in ir["nodes"] if n["op"] == "fuselm.experts.default")
        args[family] = node["args"][7:]
        has_bias = node["args"][5] is not None and node["args"][6] is not None
        assert has_bias == (family == "gpt_oss")
    assert args["qwen3_moe"] == ["silu", True, False, True, 0.0, 0.0]
    act, concatenated, transposed, has_gate, alpha, limit = args["gpt_oss"]
    assert (act, concatenated, transposed, has_gate) == ("clamped_swiglu", False, True, True)
    assert alpha == pytest.approx(1.702, rel=1e-9) and limit == pytest.approx(7.0, rel=1e-9)


def test_unknown_gating_function_is_a_capture_error():
    from fuselm_capture import ops
    import transformers
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    m = GptOssExperts(transformers.GptOssConfig(hidden_size=8, intermediate_size=4, num_local_experts=2))
    m._apply_gate = lambda gu: torch.tanh(gu[..., ::2]) * gu[..., 1::2]
    with pytest.raises(ops.ExpertsCaptureError, match="neither act\\(gate\\) \\* up, act\\(clamp.* nor the clamped SwiGLU"):
        ops._identify_gate(m)


def test_clamped_act_mul_gate_is_read_back():
    """act(clamp(gate, max=L)) * clamp(up, -L, L) (DeepSeek-V4's experts): the activation, layout and L
    are read back from the module's own gate; the same gate with up unclamped is refused."""
    from fuselm_capture import ops
    import transformers
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    m = GptOssExperts(transformers.GptOssConfig(hidden_size=8, intermediate_size=4, num_local_experts=2))
    m._apply_gate = lambda gu: torch.nn.functional.gelu(gu[..., ::2].clamp(max=3.5)) * gu[..., 1::2].clamp(-3.5, 3.5)
    act, concatenated, alpha, limit = ops._identify_gate(m)
    assert (act, concatenated, alpha) == ("gelu", False, 0.0) and limit == pytest.approx(3.5, rel=1e-9)
    m._apply_gate = lambda gu: torch.nn.functional.silu(gu.chunk(2, -1)[0].clamp(max=3.5)) * gu.chunk(2, -1)[1]
    with pytest.raises(ops.ExpertsCaptureError):
        ops._identify_gate(m)


def test_bf16_experts_top1_agreement(fuselm_bin, model_cache, tmp_path):
    """bf16 checkpoint: per-expert bf16 tensors stack into bf16 experts (fp32 activations)."""
    model_dir = model_dir_of("qwen3_moe", model_cache, dtype=torch.bfloat16)
    prompt = prompt_of(64, 512, seed=3)
    result, ours = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 16, tmp_path)
    ref = hf_logits(hf_model(model_dir, dtype=torch.bfloat16), prompt + result["token_ids"][:-1])
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"\nqwen3_moe bf16 top-1 agreement with transformers (bf16): {agree:.1%} over {len(ref)} positions")
    assert agree >= 0.9


# ---------------------------------------------------------------- the MoE fuser on real families

# family -> what inspect must say of every MoE block (from the config: the oracle of the router)
ROUTER_DETAIL = {
    "qwen3_moe": "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=none",
    "mixtral": "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=none",
    "qwen2_moe": "router=softmax top_k=3 groups=1 correction_bias=no renorm=no scaling=1 shared=gated(glu silu)",
    "deepseek_v3": "router=sigmoid top_k=3 groups=2/4 by top2_sum correction_bias=yes renorm=yes scaling=2.5 "
                   "fp32_upcast shared=ungated(glu silu)",
    "deepseek_v2": "router=softmax top_k=3 groups=2/4 by max correction_bias=no renorm=no scaling=1.5 "
                   "fp32_upcast shared=ungated(glu silu)",
    "glm4_moe": "router=sigmoid top_k=2 groups=1 correction_bias=yes renorm=yes scaling=1.8 fp32_upcast "
                "shared=ungated(glu silu)",
    "glm4_moe_grouped": "router=sigmoid top_k=3 groups=2/4 by top2_sum correction_bias=yes renorm=yes scaling=2.5 "
                        "fp32_upcast shared=ungated(glu silu)",
    "olmoe": "router=softmax top_k=2 groups=1 correction_bias=no renorm=no scaling=1 shared=none",
    "qwen2_moe_sliding": "router=softmax top_k=3 groups=1 correction_bias=no renorm=no scaling=1 shared=gated(glu silu)",
    # GraniteMoE takes the top-k of the logits, then a softmax over those k (modeling_granitemoe.py)
    "granitemoe": "router=softmax_of_topk top_k=2 groups=1 correction_bias=no renorm=no scaling=1 shared=none",
    "deepseek_v32": "router=sigmoid top_k=2 groups=1/2 by top2_sum correction_bias=yes renorm=yes scaling=2.5 "
                    "fp32_upcast shared=ungated(glu silu)",
    "glm_moe_dsa": "router=sigmoid top_k=2 groups=1 correction_bias=yes renorm=yes scaling=2.5 fp32_upcast "
                   "shared=ungated(glu silu)",
    "dbrx": "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=none",
    # the correction bias is added as unsqueeze(bias, 0) to scores viewed as [-1, E]
    "longcat_flash_routed": "router=softmax top_k=2 groups=1 correction_bias=yes renorm=no scaling=2 fp32_upcast "
                            "shared=none",
}


def moe_layers(family: str) -> int:
    cfg = moe_models.make_config(family)
    n = getattr(cfg, "num_layers", cfg.num_hidden_layers)  # LongCat counts two attention sublayers per layer
    if hasattr(cfg, "decoder_sparse_step"):
        return sum(1 for i in range(n) if (i + 1) % cfg.decoder_sparse_step == 0)
    return n - int(getattr(cfg, "first_k_dense_replace", 0) or 0)


def inspect_json(fuselm_bin, model_dir, *extra) -> dict:
    import subprocess
    proc = subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--json", *extra], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def moe_entries(report: dict) -> list[dict]:
    return [e for e in report["modules"] if e["fuser"] == "moe"]


@pytest.mark.parametrize("family", family_status.params(moe_models.MOE_FAMILIES, capture_only=True))
def test_inspect_reports_each_router(family, fuselm_bin, model_cache):
    report = inspect_json(fuselm_bin, model_dir_of(family, model_cache))
    entries = moe_entries(report)
    if family == "llama4_text":  # transformers' Llama4TextMoe runs every expert on every token, its input
        # scaled by the router's scores (zero off the top-k), as one bmm: no experts call to fuse; it
        # runs as generic ops (parity holds, at num_experts times the routed work)
        assert entries == [], entries
        return
    assert len(entries) == moe_layers(family), entries
    if family == "gpt_oss":  # its gate linear has a bias: declined, the router runs as generic ops
        assert all(e["status"] == "rejected" and "gate linear has a bias" in e["detail"] for e in entries)
        return
    if family == "gemma4_text_moe":  # a learned per-expert factor gathered at the top-k indices scales
        # the weights: the router runs as generic ops (parity still holds)
        assert all(e["status"] == "rejected" and "multiplied by a tensor" in e["detail"] for e in entries), entries
        return
    if family == "phimoe":  # sparsemixer routing (a masked second pick, not one top-k): the router
        # is not proved and runs as generic ops (parity still holds)
        assert all(e["status"] == "rejected" and "top-k index is not the indices of a top-k" in e["detail"]
                   for e in entries), entries
        return
    if family == "longcat_flash":  # zero-compute experts: the top-k feeds the experts op through the
        # identity term, so the router is not proved and runs as generic ops (parity still holds)
        assert all(e["status"] == "rejected" and "top-k index is not the indices of a top-k" in e["detail"]
                   for e in entries), entries
        return
    assert all(e["status"] == "fused" for e in entries), entries
    assert {e["detail"] for e in entries} == {ROUTER_DETAIL[family]}


def test_sparse_attention_runs_dense_within_its_top_k_and_refuses_past_it(fuselm_bin, model_cache, tmp_path):
    """DeepSeek-V3.2's indexer picks 512 keys per query (moe_models: index_topk 512 of 1024
    positions): capture proves the pick is every key up to 512 keys (key_selection.py), so the
    context is 512 tokens, the indexer is an unread module, and the tokens and logits of a prompt
    that reaches 501 keys equal transformers' (whose eager path masks by the very top-k); a prompt
    past 512 tokens is refused in one line, never run with keys the model would not attend to."""
    import subprocess
    model_dir = model_dir_of("deepseek_v32", model_cache)
    cfg = moe_models.make_config("deepseek_v32")
    proc = subprocess.run([str(fuselm_bin), "generate", str(model_dir), "--prompt-ids", "1", "--max-tokens", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    note = next(line for line in proc.stderr.splitlines() if "not loaded" in line)
    assert all(f"model.layers.{i}.self_attn.indexer.*" in note for i in range(cfg.num_hidden_layers)), note
    ir = json.loads((model_dir / "fuselm-ir" / "ir.json").read_text())
    assert ir["model"]["max_position_embeddings"] == cfg.index_topk < cfg.max_position_embeddings
    check_parity("deepseek_v32/470", fuselm_bin, model_dir, prompt_of(470, cfg.vocab_size, seed=9), tmp_path,
                 model=hf_model(model_dir))
    proc = subprocess.run([str(fuselm_bin), "generate", str(model_dir), "--prompt-ids",
                           ",".join(map(str, prompt_of(cfg.index_topk + 1, cfg.vocab_size, seed=1))),
                           "--max-tokens", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "513" in last and "512" in last, proc.stderr


@pytest.mark.parametrize("family", ["qwen2_moe", "glm4_moe_grouped"])
def test_routing_kernel_matches_generic_router(family, fuselm_bin, model_cache, tmp_path):
    """The fused router (one routing op) against the same router run as the captured ATen ops."""
    model_dir = model_dir_of(family, model_cache)
    prompt = prompt_of(40, 512, seed=5)
    res_f, fused = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 8, tmp_path)
    res_g, generic = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 8, tmp_path, extra=["--disable-fuser", "moe"])
    assert res_f["token_ids"] == res_g["token_ids"]
    assert float(np.abs(fused - generic).max()) <= 1e-5 * float(np.abs(generic).max())
    assert moe_entries(inspect_json(fuselm_bin, model_dir, "--disable-fuser", "moe")) == []


# ------------------------------------------ experts modules not routed through ExpertsInterface

def test_structural_experts_become_the_experts_op(model_cache):
    """LongCat-Flash's experts module is not routed through ExpertsInterface: the structural rule
    (forward(hidden, top_k_index, top_k_weights), its own [E, 2I, H] and [E, H, I] parameters,
    its forward checked on a probe) makes each call one fuselm.experts op over those parameters."""
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts
    assert not hasattr(LongcatFlashExperts, "_apply_gate")  # not prepared by use_experts_implementation
    from fuselm_capture.capture import capture_model_dir
    ir = json.loads(capture_model_dir(model_dir_of("longcat_flash_routed", model_cache)).read_text())
    cfg = moe_models.make_config("longcat_flash_routed")
    nodes = [n for n in ir["nodes"] if n["op"] == "fuselm.experts.default"]
    assert len(nodes) == cfg.num_layers
    names = {n["name"]: n for n in ir["nodes"]}
    for node in nodes:
        assert node["args"][5:] == [None, None, "silu", True, False, True, 0.0, 0.0]
        gate_up, down = (ir["parameters"][names[a["ref"]]["target"]]["shape"] for a in node["args"][3:5])
        assert gate_up == [cfg.n_routed_experts, 2 * cfg.expert_ffn_hidden_size, cfg.hidden_size]
        assert down == [cfg.n_routed_experts, cfg.hidden_size, cfg.expert_ffn_hidden_size]


def step3p7_experts(limit):
    import transformers
    from transformers.models.step3p7.modeling_step3p7 import Step3p7Experts
    cfg = transformers.Step3p7TextConfig(hidden_size=8, moe_intermediate_size=4, num_local_experts=3, hidden_act="silu")
    torch.manual_seed(0)
    m = Step3p7Experts(cfg, swiglu_limit=limit)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_()
    return m


class StepBlock(torch.nn.Module):
    """A router (top-2 of a softmax) in front of Step3p7Experts, as its MoE block calls it."""

    def __init__(self, limit):
        super().__init__()
        self.gate = torch.nn.Linear(8, 3, bias=False)
        self.experts = step3p7_experts(limit)

    def forward(self, x):
        w, i = torch.topk(torch.softmax(self.gate(x[0]), dim=-1), 2, dim=-1)
        return self.experts(x[0], i, w).unsqueeze(0)


def test_structural_rule_proves_the_gating_function_by_behaviour(tmp_path):
    """Step3p7Experts (not routed through ExpertsInterface): without a clamp it computes
    silu(gate) * up and is taken, its forward becoming the experts op; with its clamp after the
    activation (a form the kernel does not have) the probe disagrees, the module is left alone and
    export, stopped by its data-dependent loop, says why."""
    from fuselm_capture import ops
    from fuselm_capture.capture import CaptureError, capture_module
    plain = step3p7_experts(None)
    ops.identify_experts(plain)
    assert plain._fuselm_stacked == ("gate_up_proj", "down_proj", "silu")
    t = torch.export.Dim("num_tokens", min=2, max=64)
    ir = json.loads(capture_module(StepBlock(None).eval(), {"x": torch.randn(1, 5, 8)}, {"x": {1: t}},
                                   tmp_path / "plain").read_text())
    assert [n["args"][7] for n in ir["nodes"] if n["op"] == "fuselm.experts.default"] == ["silu"]
    # Name blind: with every module, parameter and class renamed, the same graph.
    from test_moe_toys import scramble
    torch.manual_seed(0)
    renamed = json.loads(capture_module(scramble(StepBlock(None)).eval(), {"x": torch.randn(1, 5, 8)}, {"x": {1: t}},
                                        tmp_path / "renamed").read_text())
    assert [n["op"] for n in renamed["nodes"]] == [n["op"] for n in ir["nodes"]]
    assert ([n["args"][5:] for n in renamed["nodes"] if n["op"] == "fuselm.experts.default"] ==
            [n["args"][5:] for n in ir["nodes"] if n["op"] == "fuselm.experts.default"])
    assert not any("gate_up_proj" in k for k in renamed["parameters"])
    with pytest.raises(CaptureError, match=r"experts \(Step3p7Experts\).*not captured as an experts op: "
                                           r"Step3p7Experts is not routed through ExpertsInterface and it does not "
                                           r"compute sum_k w_k"):
        capture_module(StepBlock(0.5).eval(), {"x": torch.randn(1, 5, 8)}, {"x": {1: t}}, tmp_path / "clamped")


def test_identity_experts_are_captured_by_behaviour(tmp_path):
    """LongCat-Flash's zero-compute experts make gate_up [E+Z, 2I, H] and down [E, H, I]: the probe
    proves experts E.. add w * x (identity), so each block becomes one fuselm.experts op over the
    routed experts plus that identity term (parity with its default 256 zero experts is the
    longcat_flash family). A module whose extra experts compute anything else is refused."""
    from transformers import AutoModelForCausalLM
    from fuselm_capture import ops
    from fuselm_capture.capture import capture_model_dir
    cfg = moe_models.make_config("longcat_flash")
    cfg.zero_expert_num = 2
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "m")
    ir = json.loads(capture_model_dir(tmp_path / "m").read_text())
    assert sum(n["op"] == "fuselm.experts.default" for n in ir["nodes"]) == 2  # two MoE blocks

    model = AutoModelForCausalLM.from_config(cfg)
    block = next(m for m in model.modules() if type(m).__name__ == "LongcatFlashExperts")
    base = type(block)
    zeroing = type("ZeroingExperts", (base,), {})  # its extra experts output zero instead
    zeroing.forward = lambda self, x, ids, w: base.forward(self, x, torch.clamp(ids, max=self.num_routed_experts - 1),
                                                           torch.where(ids >= self.num_routed_experts, 0.0, w))
    block.__class__ = zeroing
    ops.identify_experts(model)
    assert "zero-compute" in block._fuselm_not_experts, block._fuselm_not_experts
