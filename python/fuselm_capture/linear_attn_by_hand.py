"""Softmax-free, decay-masked linear attention written inline, found by dataflow and rewritten into
fuselm::ssd_scan.

A linear attention computed blockwise in Python (a loop over blocks of the tokens: Q·Kᵀ masked by a
decay inside a block, a carried K ᵀ·V state between blocks) has no kernel dispatch point, so
torch.export specialises the token count and fails with `Constraints violated`. Capture then:

1. Bounded export. The token dimension is exported as Dim.AUTO over the same range, so torch narrows
   it to the range its guards hold on ([2, B]: one block). torch 2.13's own suggested fix for the
   first failure (`Dim('num_tokens', max=B)`) still fails its check (a guard `min(B, T) != B`), so
   the bound is read from the narrowed range instead. A second bounded export from an example of
   2B + 3 tokens covers several blocks, the carried state included.
2. Proof, on probes. A site is the computation, within one module, from the sources Q, K [1, H, T, Dk]
   and V [1, H, T, Dv] (the operands of its Q·Kᵀ and ·V products, before the per-block slices along
   the tokens) to its output O [1, H, T, Dv] (where the blocks' ·V products meet, extended through
   adds and concatenations). O is evaluated from the graph with probe values for Q, K and V (buffers
   at their recomputed values, sizes from the token count) and must be
       O = (D ∘ (Q Kᵀ)) V,   D[h, i, j] = c · exp(-s_h · (i - j)) for j <= i, 0 otherwise,
   one causal decay over all positions: c and s_h are fitted on a probe (Q = K = e0, V = the first
   token's indicator: O[h, i, 0] = c · exp(-s_h · i)), then random Q, K, V must give that output to
   fp32 rounding at both ends of both bounded ranges (a mask per block only, a non-causal mask, a
   softmax, a gate or any other value read fails), and c and s_h must agree at every probe.
3. Rewrite and lift. O becomes fuselm::ssd_scan(x=V, dt=1, A=-s, B=K, C=c·Q) (with the state
   S ← e^{-s}·S + V ⊗ K, y = S·cQ: the same sum), in the bounded graph; the graph is exported once
   more over the full range, which fails (refused) if anything left still depends on the bound.
The buffers the proof read (precomputed decays, slopes) are recorded on the module
(`_fuselm_proved_buffers`); capture_model_dir checks that the checkpoint's copies, which the model
would load, agree with them (check_checkpoint_buffers).
"""
from __future__ import annotations

import math

import torch

from . import attn_by_hand

aten = torch.ops.aten

_PRODUCTS = {aten.matmul.default, aten.bmm.default}
# Ops that carry a site's output on, in its layout, towards where its blocks meet.
_CARRY = {aten.add.Tensor, aten.cat.default, aten.clone.default, aten.contiguous.default, aten.alias.default,
          aten._to_copy.default, aten.to.dtype}
FIT_TOL = 1e-5      # relative agreement of c and s_h between probes (fp32 fits)
OUT_TOL = 1e-4      # |O - expected| <= OUT_TOL * max|expected| (fp32 blockwise sums)


class NotLinearAttention(Exception):
    """A length-specialised forward that is not provably decay-masked linear attention."""


def _users(n):
    return [u for u in n.users if u.target not in attn_by_hand._CHECKS]


def _path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def token_symbol(ep):
    """(symbol, lo, hi) of the token count of ep's first user input with a symbolic dim; None when
    torch specialised every dim (the forward fixes the count)."""
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT":
            continue
        node = next(n for n in ep.graph.nodes if n.name == spec.arg.name)
        val = node.meta.get("val")
        for d in getattr(val, "shape", ()):
            if isinstance(d, torch.SymInt) and d.node.expr in ep.range_constraints:
                sym = d.node.expr
                rng = ep.range_constraints[sym]
                return sym, int(rng.lower), int(rng.upper)
    return None


class Site:
    """One linear attention: its Q, K, V sources and its output O, in one module's nodes."""

    def __init__(self, path: str, qk: list, sym):
        self.path, self.qk, self.sym = path, qk, sym
        self.q = self._one({_source(p.args[0], sym) for p in qk}, "Q")
        self.k = self._one({_source(p.args[1].args[0], sym) for p in qk}, "K")
        below = _descendants(qk, path)
        av = [n for n in below if n.target in _PRODUCTS and n.args[0] in below]
        if not av:
            raise NotLinearAttention(f"its Q·Kᵀ {qk[0].name} reaches no ·V product")
        self.v = self._one({_source(n.args[1], sym) for n in av}, "V")
        self.out = _meeting(av, path)
        self.where = f"{path} ({_class_of(qk[0])})"

    def _one(self, nodes: set, what: str):
        nodes.discard(None)
        if len(nodes) != 1:
            raise NotLinearAttention(f"its products read {len(nodes)} {what} tensors [1, H, T, D] over the tokens, "
                                     "not one")
        return next(iter(nodes))


def _class_of(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    cls = list(stack.values())[-1][1] if stack else "?"
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]


def _is_tokens(node, sym) -> bool:
    """Whether node is [1, H, T, D] with T the token count (sym: its symbol, or its value in a
    graph exported at one length)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or val.shape[0] != 1:
        return False
    d = val.shape[2]
    return d == sym if isinstance(sym, int) else isinstance(d, torch.SymInt) and d.node.expr == sym


def _source(node, sym):
    """The tensor [1, H, T, D] over every token that node slices blocks of the tokens from (node
    itself when it is one); None when there is none."""
    while node.target is aten.slice.Tensor and node.args[1] in (2, -2):
        node = node.args[0]
    return node if _is_tokens(node, sym) else None


def _descendants(roots, path: str) -> set:
    """Nodes reached from roots through users inside the module at path (or its children)."""
    seen, stack = set(roots), list(roots)
    while stack:
        for u in _users(stack.pop()):
            if u not in seen and (_path(u) + ".").startswith(path + "."):
                seen.add(u)
                stack.append(u)
    return seen


def _meeting(av: list, path: str):
    """The first node every ·V product reaches, carried on through adds and concatenations of the
    same layout [1, H, *, Dv] while it is the only user."""
    common = set.intersection(*(_descendants([n], path) for n in av))
    if not common:
        raise NotLinearAttention("its ·V products never meet")
    order = {n: i for i, n in enumerate(av[0].graph.nodes)}
    out = min(common, key=order.__getitem__)
    shape = out.meta["val"].shape
    while True:
        users = _users(out)
        if len(users) != 1 or users[0].target not in _CARRY:
            return out
        val = users[0].meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dim() != 4 or val.shape[:2] != shape[:2] or val.shape[3] != shape[3]:
            return out
        out = users[0]


def _is_qk(n, sym) -> bool:
    if n.op != "call_function" or n.target not in _PRODUCTS or len(n.args) < 2:
        return False
    kt = n.args[1]
    if not isinstance(kt, torch.fx.Node) or kt.target is not aten.transpose.int:
        return False
    if {d % 4 for d in kt.args[1:3]} != {2, 3}:
        return False
    return _source(n.args[0], sym) is not None and _source(kt.args[0], sym) is not None


def find_sites(ep, sym) -> dict[str, Site]:
    """module path -> Site for every module holding Q·Kᵀ products over the token sources."""
    by_path: dict[str, list] = {}
    for n in ep.graph.nodes:
        if _is_qk(n, sym):
            by_path.setdefault(_path(n), []).append(n)
    sites = {}
    for path, qk in by_path.items():
        try:
            sites[path] = Site(path, qk, sym)
        except NotLinearAttention as e:
            raise NotLinearAttention(f"{path} ({_class_of(qk[0])}): {e}") from e
    return sites


# ---- the proof on probes -------------------------------------------------------------------------

def _ancestors(node, stop: set) -> set:
    seen, stack = set(), [node]
    while stack:
        for a in stack.pop().all_input_nodes:
            if a not in seen and a not in stop:
                seen.add(a)
                stack.append(a)
    return seen


class Probe:
    """Evaluates a site's O from probe values of Q, K, V at T tokens (attn_by_hand's evaluator:
    buffers at their recomputed values; sizes from T; any weight or other input is refused)."""

    def __init__(self, ep, site: Site, values: dict):
        self.ep, self.site = ep, site
        self.ev = attn_by_hand._Evaluator(ep, values, 0)
        self.needed = _ancestors(site.out, {site.q, site.k, site.v})
        specs = self.ev.specs
        self.buffers = {specs[n.name].target for n in self.needed
                        if n.op == "placeholder" and specs[n.name].kind.name in ("BUFFER", "CONSTANT_TENSOR")}

    def __call__(self, T: int, q, k, v) -> torch.Tensor:
        env = {n: t for n, t in self.ev.inputs(T, seed=T).items() if n in self.needed}
        for n in self.needed:
            val = n.meta.get("val")
            if isinstance(val, torch.SymInt):
                env[n] = int(val.node.expr.subs(self.site.sym, T))
        env.update({self.site.q: q, self.site.k: k, self.site.v: v})
        try:
            with torch.no_grad():
                out = self.ev.value(self.site.out, env)
        except attn_by_hand.Refused as e:
            raise NotLinearAttention(f"its output {self.site.out.name} depends on more than Q, K, V: {e}") from e
        want = (1, v.shape[1], T, v.shape[3])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            raise NotLinearAttention(f"its output {self.site.out.name} is {list(getattr(out, 'shape', []))} at {T} "
                                     f"tokens, not {list(want)}")
        return out


def expected(q, k, v, c: float, slopes: torch.Tensor) -> torch.Tensor:
    """c · (D ∘ Q Kᵀ) V in float64, D[h, i, j] = exp(-slopes[h]·(i - j)) for j <= i, else 0."""
    T = q.shape[2]
    dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
    decay = torch.exp(-slopes.double()[:, None, None] * dist.clamp_min(0)) * (dist >= 0)
    return c * (decay * (q.double() @ k.double().transpose(-1, -2))) @ v.double()


def _fit(probe: Probe, T: int) -> tuple[float, torch.Tensor]:
    """(c, s [H]) from Q = K = e0 and V = the first token's indicator: O[h, i, 0] = c·exp(-s_h·i)."""
    site = probe.site
    H, Dk, Dv = site.q.meta["val"].shape[1], site.q.meta["val"].shape[3], site.v.meta["val"].shape[3]
    dt = site.v.meta["val"].dtype
    q = torch.zeros(1, H, T, Dk, dtype=dt)
    q[..., 0] = 1
    v = torch.zeros(1, H, T, Dv, dtype=dt)
    v[:, :, 0, 0] = 1
    col = probe(T, q, q.clone(), v)[0, :, :, 0].double()
    c = col[:, 0]
    if not bool((c > 0).all()) or float(c.max() - c.min()) > FIT_TOL * float(c.max()):
        raise NotLinearAttention(f"a token's own weight {c.tolist()} is not one positive scale for every head")
    if not bool((col[:, 1] > 0).all()) or bool((col[:, 1] > c * (1 + FIT_TOL)).any()):
        raise NotLinearAttention(f"the weight of the previous token {col[:, 1].tolist()} is not a decay of "
                                 f"its own {c.tolist()}")
    return float(c.mean()), torch.log(c / col[:, 1])


def prove(probe: Probe, T: int) -> tuple[float, torch.Tensor]:
    """(c, s) of the site at T tokens, verified on random Q, K, V; NotLinearAttention otherwise."""
    c, s = _fit(probe, T)
    gen = torch.Generator().manual_seed(T)
    shapes = [n.meta["val"] for n in (probe.site.q, probe.site.k, probe.site.v)]
    q, k, v = (torch.randn(1, x.shape[1], T, x.shape[3], generator=gen).to(x.dtype) for x in shapes)
    got = probe(T, q, k, v).double()
    want = expected(q, k, v, c, s)
    err = (got - want).abs()
    top = float(want.abs().max())
    if float(err.max()) > OUT_TOL * top:
        i = int(err.amax(dim=(0, 1, 3)).argmax())
        raise NotLinearAttention(f"its output is not (D ∘ Q·Kᵀ)·V with one causal decay c·exp(-s_h·(i-j)) over all "
                                 f"positions: at {T} tokens it is off by {float(err.max()):.3g} (max {top:.3g}) "
                                 f"at query {i}")
    return c, s


def _same(a: tuple, b: tuple) -> bool:
    (c1, s1), (c2, s2) = a, b
    return abs(c1 - c2) <= FIT_TOL * abs(c1) and bool(((s1 - s2).abs() <= FIT_TOL * s1.abs() + 1e-7).all())


def prove_site(probes: list[tuple[Probe, list[int]]]) -> tuple[float, torch.Tensor]:
    """(c, s) agreed at every probe length of every bounded graph."""
    found = [(T, prove(p, T)) for p, counts in probes for T in counts if T >= 2]
    if not found:
        raise NotLinearAttention("no probe length of two tokens or more")
    for T, fit in found[1:]:
        if not _same(found[0][1], fit):
            raise NotLinearAttention(f"its decay differs between {found[0][0]} and {T} tokens")
    c, s = found[-1][1]
    if bool((s < -1e-7).any()):
        raise NotLinearAttention(f"its weights grow with distance (s = {s.tolist()})")
    return c, s.clamp_min(0)


# ---- bounded export, rewrite and lift ------------------------------------------------------------

def bounded(dynamic_shapes):
    """dynamic_shapes with every Dim replaced by Dim.AUTO over its range (torch narrows it)."""
    def one(d):
        if isinstance(d, torch.export.dynamic_shapes.Dim):
            return torch.export.Dim.AUTO(min=d.min, max=d.max)
        if isinstance(d, dict):
            return {k: one(v) for k, v in d.items()}
        if isinstance(d, (list, tuple)):
            return type(d)(one(v) for v in d)
        return d
    return one(dynamic_shapes)


def resized(kwargs: dict, dynamic_shapes: dict, n: int) -> dict:
    """The example kwargs with every dynamic dim of n entries (zeros: export reads no values)."""
    out = dict(kwargs)
    for name, dims in (dynamic_shapes or {}).items():
        t = kwargs[name]
        shape = list(t.shape)
        for d in dims:
            shape[d] = n
        out[name] = t.new_zeros(shape)
    return out


def _full_range(dynamic_shapes) -> tuple[int, int]:
    """(min, max) of the token count over the Dims of dynamic_shapes."""
    dims = [d for v in (dynamic_shapes or {}).values() for d in v.values()]
    if not dims:
        return 0, 0
    return (max(int(getattr(d, "min", None) or 0) for d in dims),
            min(int(getattr(d, "max", None) or 1 << 20) for d in dims))


def _probe_counts(lo: int, hi: int) -> list[int]:
    return sorted({lo, (lo + hi) // 2, hi})


def _rewrite(gm, sites: dict[str, Site], fits: dict) -> None:
    """O of each site -> transpose(ssd_scan(x=V, dt=1, A=-s, B=K, C=c·Q), 1, 2), in gm (the bounded
    graph unlifted; node names are the ExportedProgram's)."""
    nodes = {n.name: n for n in gm.graph.nodes}
    g = gm.graph
    for i, (path, site) in enumerate(sites.items()):
        c, s = fits[path]
        name = f"_fuselm_linear_attention_decay_{i}"
        # a buffer of the graph module: the lifting export takes it as a constant of the IR
        gm.register_buffer(name, (-s).to(site.v.meta["val"].dtype).contiguous(), persistent=False)
        q, k, v, out = (nodes[n.name] for n in (site.q, site.k, site.v, site.out))
        with g.inserting_before(out):
            x = g.call_function(aten.transpose.int, (v, 1, 2))
            b = g.call_function(aten.transpose.int, (k, 1, 2))
            cq = g.call_function(aten.transpose.int, (q, 1, 2))
            if c != 1.0:
                cq = g.call_function(aten.mul.Tensor, (cq, c))
            dt = g.call_function(aten.ones_like.default, (g.call_function(aten.select.int, (x, 3, 0)),))
            a = g.get_attr(name)
            y = g.call_function(torch.ops.fuselm.ssd_scan.default,
                                (x, dt, a, b, cq, None, None, False, 0.0, math.inf, 0))
            res = g.call_function(aten.transpose.int, (y, 1, 2))
        for n in (x, b, cq, dt, y, res):
            n.meta = {key: val for key, val in out.meta.items() if key in ("nn_module_stack", "stack_trace")}
        out.replace_all_uses_with(res)
    attn_by_hand._drop_dead(g)
    gm.recompile()


def _bounded_sites(ep) -> tuple:
    """(ep, token symbol, lo, hi, sites) of a bounded export; NotLinearAttention when its token count
    is fixed or it holds no Q·Kᵀ product over the tokens."""
    tok = token_symbol(ep)
    if tok is None:
        raise NotLinearAttention("the token count is fixed even in a bounded export (a loop over every token)")
    sites = find_sites(ep, tok[0])
    if not sites:
        raise NotLinearAttention("no Q·Kᵀ product over the tokens written inline")
    return (ep, *tok, sites)


def capture(module, kwargs: dict, dynamic_shapes: dict, values: dict, export) -> tuple:
    """(ExportedProgram over the full token range, report lines) for a module whose export
    specialised the token count, with its linear attention sites rewritten into fuselm::ssd_scan.
    export(module, kwargs, dynamic_shapes) exports in capture's configuration. NotLinearAttention
    (naming the site) when the forward is not provably that."""
    from . import recurrent_ops  # noqa: F401 - registers torch.ops.fuselm.ssd_scan
    least, full = _full_range(dynamic_shapes)
    ep1, sym1, lo1, hi1, sites1 = _bounded_sites(export(module, kwargs, bounded(dynamic_shapes)))
    if hi1 >= full:
        # torch keeps no bound from an example of several blocks (see ep2): start from the fewest tokens
        ep1, sym1, lo1, hi1, sites1 = _bounded_sites(
            export(module, resized(kwargs, dynamic_shapes, max(least, 2)), bounded(dynamic_shapes)))
    if hi1 >= full or hi1 < 2:
        raise NotLinearAttention(f"the bounded export found no bound below {full} tokens")
    n2 = 2 * hi1 + 3
    if n2 > full:
        raise NotLinearAttention(f"several blocks of {hi1} tokens do not fit the context of {full}")
    # At one length (torch's narrowed range of a several-block export is not sound: it keeps the
    # upper end of the full range though the loop's count is fixed).
    ep2 = export(module, resized(kwargs, dynamic_shapes, n2), None)
    sites2 = find_sites(ep2, n2)
    fits, report, proved = {}, [], {}
    for path, site in sites1.items():
        if path not in sites2:
            raise NotLinearAttention(f"{site.where}: its products at {n2} tokens are not found as at {hi1}")
        p1, p2 = Probe(ep1, site, values), Probe(ep2, sites2[path], values)
        try:
            fits[path] = prove_site([(p1, _probe_counts(lo1, hi1)), (p2, [n2])])
        except NotLinearAttention as e:
            raise NotLinearAttention(f"{site.where}: {e}") from e
        proved.update({t: values[t] for t in p1.buffers | p2.buffers if t in values})
        c, s = fits[path]
        report.append(f"{site.where}: c={c:.6g} decay s=[{', '.join(f'{x:.6g}' for x in s.tolist())}], proved at "
                      f"{lo1}..{hi1} and {n2} tokens")
    gm = ep1.module(check_guards=False)
    _rewrite(gm, sites1, fits)
    try:
        ep = export(gm, kwargs, dynamic_shapes)
    except Exception as e:  # noqa: BLE001 - torch's failure says what still depends on the bound
        from . import messages
        raise NotLinearAttention(f"after rewriting {', '.join(s.where for s in sites1.values())} the graph still "
                                 f"depends on the bound of {hi1} tokens: {messages.reason(str(e))}") from e
    module._fuselm_proved_buffers = proved
    return ep, report


def check_checkpoint_buffers(proved: dict, found: dict, ckpt: dict, model_dir) -> None:
    """Refuses (ValueError) a checkpoint whose copy of a buffer the proof read differs from the value
    proved with (to the rounding of the checkpoint's dtype): the model would load that copy."""
    from pathlib import Path

    from safetensors import safe_open
    for target, used in sorted(proved.items()):
        keys = (found.get(target) or {}).get("keys") or []
        if len(keys) != 1 or keys[0] not in ckpt:
            continue
        with safe_open(str(Path(model_dir) / ckpt[keys[0]]["file"]), "pt") as f:
            held = f.get_tensor(keys[0])
        eps = torch.finfo(held.dtype).eps if held.dtype.is_floating_point else 0.0
        used = used.detach().to(torch.float64)
        if tuple(held.shape) != tuple(used.shape) or not torch.allclose(
                held.double(), used, rtol=2 * eps + 1e-6, atol=1e-30):
            raise ValueError(f"checkpoint tensor {keys[0]} differs from the {target} the linear attention was "
                             "proved with")
