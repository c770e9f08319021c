"""Capture of hybrid and recurrent models (docs/recurrent.md): each recurrent kernel call becomes one
fuselm op, with no token loop, and the graph computes what transformers computes.

For every family of hybrid_models.HYBRID_FAMILIES whose recurrences go through a kernel dispatch
point: the graph capture makes (capture._build_and_export, the production path) holds one
recurrent op per call of a dispatch point in transformers' own eager forward (counted there), with
state indices 0, 1, ... in graph order and a dynamic token count; run with plain PyTorch loops for
the fuselm ops (hybrid_reference.py, from their schemas) and the checkpoint's weights, it gives
transformers' logits (a linear attention written inline counts one ssd_scan per module:
linear_attn_by_hand.py; the families whose recurrence is written inline token by token are
captured by recurrence_by_hand.py and tested in test_recurrence_by_hand.py and
test_linear_scan_by_hand.py). A dispatch-point call the op cannot express (an initial state, a
final state requested, an activation the op lacks) is refused naming the point and the module.
Also: relu2 experts (Nemotron-H's) run in the engine as torch computes them.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

import hybrid_models
import hybrid_reference

LONG = os.environ.get("FUSELM_LONG") == "1"
DISPATCHED = [f for f in hybrid_models.HYBRID_FAMILIES if f not in hybrid_models.INLINE_SCAN]
RECURRENT = ("causal_conv1d", "ssd_scan", "selective_scan", "gated_delta_rule")


def model_dir(family, model_cache):
    d = model_cache / f"hybrid_{family}"
    if not (d / "config.json").exists():
        hybrid_models.build(family, d)
    return d


def capture_graph(d):
    """(model on meta, ExportedProgram) as capture_model_dir makes them."""
    from transformers import AutoConfig
    from fuselm_capture import capture, ops
    ops.register_interfaces()
    config = AutoConfig.from_pretrained(d)
    kwargs = {"attn_implementation": ops.ATTENTION_NAME, "dtype": torch.float32}
    model, _, ep = capture._build_and_export(config, kwargs, config.max_position_embeddings)
    return model, ep


def dispatch_calls(hf, ids) -> int:
    """How many times transformers' eager forward calls a dispatch point that has a substitute."""
    import sys
    from fuselm_capture.dispatch import DISPATCH, dispatch_point
    count = [0]
    patched = []

    def counting(fn):
        def call(*args, **kwargs):
            count[0] += 1
            return fn(*args, **kwargs)
        return call
    mods = {sys.modules[c.__module__] for m in hf.modules() for c in type(m).__mro__ if c.__module__ in sys.modules}
    for mod in mods:
        for name, value in list(vars(mod).items()):
            point = dispatch_point(value)
            if point is not None and DISPATCH.get(point[0]) is not None:
                patched.append((mod, name, value))
                setattr(mod, name, counting(value))
    try:
        with torch.no_grad():
            hf(ids, use_cache=False)
    finally:
        for mod, name, value in patched:
            setattr(mod, name, value)
    return count[0]


def check_family(family, model_cache):
    from transformers import AutoModelForCausalLM
    d = model_dir(family, model_cache)
    _, ep = capture_graph(d)
    nodes = [n for n in ep.graph.nodes if n.op == "call_function" and str(n.target).startswith("fuselm.")]
    recurrent = [n for n in nodes if str(n.target).split(".")[1] in RECURRENT]
    assert [n.args[-1] for n in recurrent] == list(range(len(recurrent))), "state indices are not 0.. in graph order"
    ids_node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids")
    assert isinstance(ids_node.meta["val"].shape[1], torch.SymInt), "the token count was specialised"

    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.tensor([np.random.default_rng(1).integers(0, 512, size=70).tolist()])
    # A linear attention written inline (no dispatch point) is one ssd_scan per module of its class.
    linear = sum(type(m).__name__ == hybrid_models.INLINE_LINEAR_ATTENTION.get(family) for m in hf.modules())
    assert len(recurrent) == dispatch_calls(hf, ids[:, :7]) + linear == dispatch_calls(hf, ids) + linear > 0

    gm = ep.module()
    # The checkpoint's weights, and the buffers transformers computes at init (rope tables), which
    # capture recomputed on the CPU and the engine reads from the IR's constants.
    gm.load_state_dict(hf.state_dict(), strict=False, assign=True)
    for name, buf in hf.named_buffers():
        owner, _, leaf = name.rpartition(".")
        try:
            mod = gm.get_submodule(owner)
        except AttributeError:
            continue
        if isinstance(getattr(mod, leaf, None), torch.Tensor):
            setattr(mod, leaf, buf)
    left = [n for n, t in [*gm.named_parameters(), *gm.named_buffers()] if t.is_meta]
    assert not left, left
    interp = hybrid_reference.ReferenceInterpreter(gm)
    with torch.no_grad():
        out = interp.run(ids, torch.arange(70).unsqueeze(0))
        ref = hf(ids, use_cache=False).logits
    got = out[0]  # the logits (a ModelOutput or a tuple)
    scale = float(ref.abs().max())
    diff = float((got - ref).abs().max())
    assert diff <= 1e-4 * scale, f"{family}: max |logit diff| {diff:.3g} (max |logit| {scale:.3g})"
    assert sum(interp.ran.get(op, 0) for op in RECURRENT) == len(recurrent)
    print(f"\n{family}: {dict(sorted(interp.ran.items()))}, rel. logit diff {diff / scale:.1e}")


IN_CI = ["mamba", "bamba", "qwen3_next", "kimi_linear", "lfm2"]


@pytest.mark.parametrize("family", IN_CI)
def test_graph_computes_what_transformers_computes(family, model_cache):
    check_family(family, model_cache)


@pytest.mark.skipif(not LONG, reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
@pytest.mark.parametrize("family", [f for f in DISPATCHED if f not in IN_CI])
def test_long_graph_computes_what_transformers_computes(family, model_cache):
    check_family(family, model_cache)


# ---- refusals, on a toy module calling transformers' own dispatch decorator ----------------------

def _dispatched(name):
    from transformers.integrations import use_kernel_func_from_hub_with_fallback
    return use_kernel_func_from_hub_with_fallback(name, "fuselm_no_such_package")


@_dispatched("chunk_gated_delta_rule")
def toy_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, **kwargs):
    return value * beta[..., None], None


@_dispatched("causal_conv1d_fn")
def toy_conv(hidden_states, weight, bias=None, activation=None, **kwargs):
    return hidden_states


class ToyMixer(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.proj = nn.Linear(8, 8)
        self.conv = nn.Parameter(torch.randn(8, 4))

    def forward(self, x):
        h = self.proj(x)
        if self.how.startswith("conv"):
            act = {"conv": "silu", "conv_gelu": "gelu"}[self.how]
            return toy_conv(h.transpose(1, 2), self.conv, None, activation=act).transpose(1, 2)
        q = h.view(1, -1, 2, 4)
        g, beta = h[..., :2], h[..., 2:4].sigmoid()
        state = torch.zeros(1, 2, 4, 4) if self.how == "initial_state" else None
        out, _ = toy_delta_rule(q, q, q, g=g, beta=beta, initial_state=state,
                                output_final_state=self.how == "final_state", use_qk_l2norm_in_kernel=True)
        return out.reshape(1, -1, 8)


class ToyLM(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.mixer = ToyMixer(how)

    def forward(self, input_ids):
        return self.mixer(self.embed(input_ids))


def capture_toy(how, tmp_path):
    from fuselm_capture.capture import capture_module
    t = torch.export.Dim("num_tokens", min=2, max=64)
    return capture_module(ToyLM(how).eval(), {"input_ids": torch.zeros(1, 6, dtype=torch.long)},
                          {"input_ids": {1: t}}, tmp_path / "ir")


@pytest.mark.parametrize("how,why", [
    ("initial_state", "a state is given (initial_state"),
    ("final_state", "output_final_state=True"),
    ("conv_gelu", "activation 'gelu' is none of None, silu"),
])
def test_a_call_the_op_cannot_express_is_refused_naming_point_and_module(how, why, tmp_path):
    from fuselm_capture.capture import CaptureError
    with pytest.raises(CaptureError) as err:
        capture_toy(how, tmp_path)
    msg = str(err.value)
    point = "causal_conv1d_fn" if how.startswith("conv") else "chunk_gated_delta_rule"
    assert f"dispatch point {point} called from module mixer (ToyMixer)" in msg and why in msg, msg
    assert "\n" not in msg, msg


def test_substitutes_are_restored_after_capture(tmp_path):
    """The substitutes live only during the export: the module globals hold transformers' own
    dispatch functions again afterwards (also after a refusal)."""
    import json
    mine = globals()
    before = (mine["toy_delta_rule"], mine["toy_conv"])
    ir = json.loads(capture_toy("delta", tmp_path).read_text())
    ops = [n for n in ir["nodes"] if n["op"] == "fuselm.gated_delta_rule.default"]
    assert len(ops) == 1 and ops[0]["args"][-2:] == [True, 0], ops
    with pytest.raises(Exception):
        capture_toy("initial_state", tmp_path)
    assert (mine["toy_delta_rule"], mine["toy_conv"]) == before


# ---- relu2 experts (Nemotron-H) in the engine -----------------------------------------------------

class Relu2ExpertsLM(nn.Module):
    """embedding -> x + experts(x) -> head, the experts transformers' own Nemotron-H experts module
    (relu(up x)^2, no gate) behind a softmax top-2 router."""

    def __init__(self):
        super().__init__()
        import transformers
        from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHExperts
        from fuselm_capture import ops
        ops.register_interfaces()
        cfg = transformers.NemotronHConfig(hidden_size=32, moe_intermediate_size=16, n_routed_experts=4,
                                           num_experts_per_tok=2)
        cfg._experts_implementation = ops.ATTENTION_NAME
        self.embed = nn.Embedding(64, 32)
        self.router = nn.Linear(32, 4, bias=False)
        self.experts = NemotronHExperts(cfg)
        self.head = nn.Linear(32, 64, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        flat = x.reshape(-1, 32)
        w, i = torch.topk(self.router(flat).softmax(-1), 2, dim=-1)
        return self.head(x + self.experts(flat, i, w).view(x.shape))


def test_relu2_experts_run_as_torch_computes_them(fuselm_bin, tmp_path):
    import fuselm_runner
    import toy_lm
    from fuselm_capture import ops
    torch.manual_seed(0)
    model = Relu2ExpertsLM().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    ops.identify_experts(model)
    assert model.experts._fuselm_gate[0] == "relu2"
    toy_lm.save_toy_lm(model, tmp_path / "m", 64)
    prompt = [3, 14, 15, 9, 26, 5, 35, 8]
    _, ours = fuselm_runner.generate(fuselm_bin, tmp_path / "m", prompt, 1, tmp_path)
    model.experts.config._experts_implementation = "eager"  # the oracle: transformers' own experts loop
    with torch.no_grad():
        ref = model(torch.tensor([prompt]), torch.arange(8).unsqueeze(0))[0].numpy()
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()
