"""The MoE fuser on toy routers: small LMs (embedding → x + MoE block(x) → head) whose block is a
hand-written router in front of transformers' own experts module (Qwen3MoeExperts, which routes
through ExpertsInterface), captured through the normal capture path. For each router: what
`inspect --json` reports (fused with its kind, groups, scaling, shared expert; or declined with
its reason), and the engine's logits against the toy's own PyTorch forward (the oracle), fused
and with the moe fuser disabled.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import fuselm_runner
import toy_lm

V, H, I, E, K = 64, 32, 16, 8, 2


def experts_module():
    import transformers
    from fuselm_capture import ops
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts
    ops.register_interfaces()
    cfg = transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, hidden_act="silu")
    cfg._experts_implementation = ops.ATTENTION_NAME
    return Qwen3MoeExperts(cfg)


class GluMlp(nn.Module):
    def __init__(self, glu=True):
        super().__init__()
        self.glu = glu
        self.up = nn.Linear(H, I, bias=False)
        self.gate = nn.Linear(H, I, bias=False) if glu else None
        self.down = nn.Linear(I, H, bias=False)

    def forward(self, x):
        h = F.silu(self.gate(x)) * self.up(x) if self.glu else F.relu(self.up(x))
        return self.down(h)


class Router(nn.Module):
    """Variants of the routers transformers' MoE families write, plus ones the fuser must decline."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.empty(E, H))
        self.bias = nn.Parameter(torch.empty(E)) if kind == "biased_gate" else None
        self.correction = nn.Parameter(torch.empty(E)) if kind in ("grouped", "correction", "viewed_correction") else None

    def forward(self, x):
        k = self.kind
        if k == "fp32_upcast":
            logits = F.linear(x.type(torch.float32), self.weight.type(torch.float32))
        elif k == "disconnected":
            logits = x[..., :E] * 3.0  # scores that no gate linear produced
        else:
            logits = F.linear(x, self.weight, self.bias)
        if k in ("softmax_renorm", "fp32_upcast", "biased_gate", "disconnected"):
            w, i = torch.topk(F.softmax(logits, dim=-1, dtype=torch.float), K, dim=-1)
            return w / w.sum(dim=-1, keepdim=True), i
        if k in ("l1_norm", "l2_norm"):  # DBRX's: top-k softmax weights over their p-norm
            w, i = torch.topk(F.softmax(logits, dim=1, dtype=logits.dtype), K, dim=-1)
            return w / torch.norm(w, p=1 if k == "l1_norm" else 2, dim=-1, keepdim=True), i
        if k == "sigmoid_scaled":
            s = logits.sigmoid()
            i = torch.topk(s, K, dim=-1)[1]
            return s.gather(1, i) * 2.0, i
        if k == "correction":
            s = logits.sigmoid()
            i = torch.topk(s + self.correction, K, dim=-1, sorted=False)[1]
            w = s.gather(1, i)
            return w / (w.sum(dim=-1, keepdim=True) + 1e-20), i
        if k == "viewed_correction":  # LongCat-Flash's: the bias as [1, E], the scores viewed as [-1, E]
            s = logits.softmax(dim=-1)
            i = torch.topk(s.view(-1, E) + self.correction.unsqueeze(0), K, dim=-1, sorted=False)[1]
            return s.gather(1, i) * 2.0, i
        if k == "grouped":  # DeepSeek-V3's router: 2 of 4 groups by the sum of each group's top 2
            s = logits.sigmoid()
            c = s + self.correction
            gs = c.view(-1, 4, E // 4).topk(2, dim=-1)[0].sum(dim=-1)
            gi = torch.topk(gs, k=2, dim=-1, sorted=False)[1]
            gm = torch.zeros_like(gs)
            gm.scatter_(1, gi, 1)
            m = gm.unsqueeze(-1).expand(-1, 4, E // 4).reshape(-1, E)
            i = torch.topk(c.masked_fill(~m.bool(), float("-inf")), K, dim=-1, sorted=False)[1]
            w = s.gather(1, i)
            return w / (w.sum(dim=-1, keepdim=True) + 1e-20) * 1.5, i
        if k == "grouped_max":  # DeepSeek-V2's group-limited greedy: 1 of 4 groups by max, masked with 0
            s = logits.softmax(dim=-1, dtype=torch.float32)
            gs = s.view(-1, 4, E // 4).max(dim=-1).values
            gi = torch.topk(gs, k=1, dim=-1, sorted=False)[1]
            gm = torch.zeros_like(gs)
            gm.scatter_(1, gi, 1)
            m = gm.unsqueeze(-1).expand(-1, 4, E // 4).reshape(-1, E)
            w, i = torch.topk(s.masked_fill(~m.bool(), 0.0), K, dim=-1, sorted=False)
            return w, i
        if k == "topk_softmax":  # gpt-oss's order: top-k of the logits, then softmax over them
            v, i = torch.topk(logits, K, dim=-1)
            return F.softmax(v, dim=-1, dtype=v.dtype), i
        raise ValueError(k)


class Block(nn.Module):
    def __init__(self, kind, shared):
        super().__init__()
        self.router = Router(kind)
        self.experts = experts_module()
        self.shared_kind = shared
        self.shared = GluMlp(glu=shared != "plain_mlp") if shared != "none" else None
        self.shared_gate = nn.Linear(H, 1, bias=False) if shared == "gated" else None
        self.extra = nn.Linear(H, H, bias=False) if shared == "extra_module" else None

    def forward(self, x):
        flat = x.reshape(-1, H)
        w, i = self.router(flat)
        out = self.experts(flat, i, w)
        if self.shared is not None:
            s = self.shared(flat)
            if self.shared_gate is not None:
                s = torch.sigmoid(self.shared_gate(flat)) * s
            out = out + s
            if self.extra is not None:  # a module the fuser has no role for
                out = out + self.extra(flat)
            if self.shared_kind == "shared_read_twice":  # the shared output also feeds something else
                out = out * (1.0 + 0.1 * torch.tanh(s))
        return out.view(x.shape)


class ToyLM(nn.Module):
    def __init__(self, kind, shared="none"):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.block = Block(kind, shared)
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids) + 0.0 * position_ids.unsqueeze(-1).float()
        return self.head(x + self.block(x))


def build(kind, shared, out_dir: Path, transform=None):
    torch.manual_seed(0)
    model = ToyLM(kind, shared).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3 if p.dim() >= 2 else 0.2)
    if transform is not None:
        model = transform(model)
    toy_lm.save_toy_lm(model, out_dir, V)
    return model, out_dir


def inspect(fuselm_bin, model_dir, *extra) -> dict:
    import subprocess
    proc = subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--json", *extra], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


CASES = [  # (router kind, shared expert, expected status, expected detail or reason fragment)
    ("softmax_renorm", "none", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=none"),
    ("sigmoid_scaled", "none", "fused",
     "router=sigmoid top_k=2 groups=1 correction_bias=no renorm=no scaling=2 shared=none"),
    ("fp32_upcast", "none", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 fp32_upcast shared=none"),
    ("correction", "none", "fused",
     "router=sigmoid top_k=2 groups=1 correction_bias=yes renorm=yes scaling=1 shared=none"),
    ("viewed_correction", "none", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=yes renorm=no scaling=2 shared=none"),
    ("grouped", "ungated", "fused",
     "router=sigmoid top_k=2 groups=2/4 by top2_sum correction_bias=yes renorm=yes scaling=1.5 "
     "shared=ungated(glu silu)"),
    ("grouped_max", "none", "fused",
     "router=softmax top_k=2 groups=1/4 by max correction_bias=no renorm=no scaling=1 shared=none"),
    ("topk_softmax", "none", "fused",
     "router=softmax_of_topk top_k=2 groups=1 correction_bias=no renorm=no scaling=1 shared=none"),
    ("softmax_renorm", "gated", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=gated(glu silu)"),
    ("softmax_renorm", "plain_mlp", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=ungated(mlp relu)"),
    ("softmax_renorm", "extra_module", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=ungated (not summed in: "
     "the block combines the experts with more than its shared expert)"),
    ("softmax_renorm", "shared_read_twice", "fused",
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=ungated (not summed in: "
     "a value of the shared expert is read outside it)"),
    ("l1_norm", "none", "fused",  # the L1 norm of non-negative weights is their sum
     "router=softmax top_k=2 groups=1 correction_bias=no renorm=yes scaling=1 shared=none"),
    ("l2_norm", "none", "rejected", "divided by something other than their own sum"),
    ("biased_gate", "none", "rejected", "the gate linear has a bias"),
    ("disconnected", "none", "rejected", "do not come from a linear gate"),
]


@pytest.mark.parametrize("kind,shared,status,detail", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_toy_router(kind, shared, status, detail, fuselm_bin, tmp_path):
    model, model_dir = build(kind, shared, tmp_path / "toy")
    report = inspect(fuselm_bin, model_dir)
    entries = [e for e in report["modules"] if e["fuser"] == "moe"]
    assert [(e["module"], e["status"]) for e in entries] == [("block", status)], entries
    if status == "fused":
        assert entries[0]["detail"] == detail
    else:
        assert detail in entries[0]["detail"]
    # Logits against the toy's own forward (eager experts), fused and with the router unfused.
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, V, size=24)]
    model.block.experts.config._experts_implementation = "eager"
    with torch.no_grad():
        ref = model(torch.tensor([prompt]), torch.arange(len(prompt)).unsqueeze(0))[0].numpy()
    tol = 1e-4 * float(np.abs(ref).max())
    for extra in ([], ["--disable-fuser", "moe"]):
        _, ours = fuselm_runner.generate(fuselm_bin, model_dir, prompt, 1, tmp_path, extra=extra)
        assert float(np.abs(ours - ref).max()) <= tol, extra


class InPlaceBlock(nn.Module):
    """Writes through a view with an in-place op whose own result nobody reads (as routers do
    with scatter_ into a group mask, and MLA with copy_ into its key)."""

    def forward(self, x):
        y = x.clone()
        y[..., : H // 2].mul_(3.0)
        return y


def test_in_place_writes_survive_the_rewrite(fuselm_bin, tmp_path):
    from safetensors.torch import save_file
    from fuselm_capture.capture import capture_module
    torch.manual_seed(0)
    model = ToyLM("softmax_renorm").eval()
    model.block = InPlaceBlock()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    t = torch.export.Dim("num_tokens", min=2, max=2048)
    kwargs = {"input_ids": torch.zeros(1, 8, dtype=torch.long), "position_ids": torch.arange(8).unsqueeze(0)}
    out_dir = tmp_path / "inplace"
    capture_module(model, kwargs, {"input_ids": {1: t}, "position_ids": {1: t}}, out_dir / "fuselm-ir")
    ir = json.loads((out_dir / "fuselm-ir" / "ir.json").read_text())
    assert any(n["op"] == "aten.mul_.Tensor" for n in ir["nodes"])
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out_dir / "model.safetensors"))
    config = json.dumps({"vocab_size": V, "max_position_embeddings": 2048})
    (out_dir / "config.json").write_text(config)
    ir["model"].update(config_json=config, vocab_size=V, max_position_embeddings=2048)
    (out_dir / "fuselm-ir" / "ir.json").write_text(json.dumps(ir))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    with torch.no_grad():
        ref = model(torch.tensor([prompt]), torch.arange(len(prompt)).unsqueeze(0))[0].numpy()
    for extra in ([], ["--no-fuse"]):  # with fusers on, the driver's dead-node pass runs
        _, ours = fuselm_runner.generate(fuselm_bin, out_dir, prompt, 1, tmp_path, extra=extra)
        assert float(np.abs(ours - ref).max()) <= 1e-5 * float(np.abs(ref).max()), extra


def scramble(module: nn.Module, counter=None) -> nn.Module:
    """Renames every submodule and parameter of `module` (and its class) in place: the model's
    own code keeps working through properties, but the captured graph, module paths, classes and
    checkpoint keys carry only the new names."""
    counter = counter if counter is not None else [0]
    props = {}
    for table in ("_modules", "_parameters"):
        old = getattr(module, table)
        new = {}
        for name, value in old.items():
            counter[0] += 1
            alias = f"z{counter[0]}"
            new[alias] = value
            props[name] = property(lambda self, t=table, a=alias: getattr(self, t)[a])
        old.clear()
        old.update(new)
    module.__class__ = type(f"C{counter[0]}", (module.__class__,), props)
    for child in list(module._modules.values()):
        if child is not None:
            scramble(child, counter)
    return module


def test_moe_fuser_is_name_blind(fuselm_bin, tmp_path):
    """The same toy MoE LM with every module, parameter and class renamed: same plan, same logits."""
    plans, logits = [], []
    for renamed in (False, True):
        model, model_dir = build("grouped", "gated", tmp_path / str(renamed), transform=scramble if renamed else None)
        report = inspect(fuselm_bin, model_dir)
        # A rejection that names the module it overlaps carries that module's (renamed) path.
        plans.append(sorted((e["fuser"], e["status"], e["detail"].split(" of ")[0]) for e in report["modules"]))
        _, out = fuselm_runner.generate(fuselm_bin, model_dir, [5, 9, 2, 33, 7, 61], 4, tmp_path)
        logits.append(out)
        paths = {e["module"] for e in report["modules"]}
        assert ("block" in paths) != renamed
    assert plans[0] == plans[1]
    grouped = next(c[3] for c in CASES if c[:2] == ("grouped", "ungated"))
    assert ("moe", "fused", grouped.replace("shared=ungated", "shared=gated")) in plans[1]
    assert ("glu", "rejected", "overlaps the moe fusion") in plans[1]  # the shared GLU is summed in
    np.testing.assert_array_equal(logits[0], logits[1])
