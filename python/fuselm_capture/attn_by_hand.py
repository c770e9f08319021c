"""Attention written by hand, found by dataflow in an exported graph and rewritten into fuselm::attention.

A model that does not dispatch through transformers' AttentionInterface (or looks its attention up
in a dict of its own, which has no entry for fuselm) is captured through its eager implementation,
and its graph then computes attention with plain ops:

    P = Q·Kᵀ        matmul / bmm, or baddbmm (beta·input + alpha·Q·Kᵀ)
    Z = g(P)        any ops between P and the softmax: a scale, an additive mask or bias, where/max
                    with a fill value, views and dtype casts
    A = softmax(Z, key axis) → casts, views, dropout in eval → A·V   matmul / bmm

Each site is rewritten into one fuselm::attention op (q, k, v taken from the two products' operands,
so the engine's KV cache holds that k and v), only after g is proved, on probe values, to be
    g(P) = scale·P + b   on the visible entries, and -> -inf (softmax weight 0) on the masked ones,
where b, the bias at P = 0, is computed from the graph itself at several token counts (positions
0..T-1, as capture runs the model). Its hidden keys must be the same for every head and exactly one
of the kinds the engine runs: causal, or a sliding window of W keys. Where keys are visible, b must be
    b[h, q, k] = slope[h] · k + r[h, q]        (ALiBi; slope = 0 for every head: a pure mask)
for some per-head slopes and any per-row constants r. The softmax over keys is invariant under
adding one constant to a row (softmax(z + c) = softmax(z)), so r is dropped and the bias is the
engine's slope[h] · (k - q): this accepts both the key-position form slope·k (bloom: the slopes
times the positions of the keys) and the distance form slope·(k - q). The slopes are fitted on the
probe per head, checked on every visible entry to the rounding of the bias dtype, required equal at
every token count, and written into the op as data (alibi_slopes). A line only to 16-bit rounding
(falcon's alibi variant multiplies bfloat16 slopes by the positions) is refused: the engine adds
the exact line, whose logits would differ from the model's. A g that is not affine
(softcap through tanh), a bias of any other form (a learned or relative bias), a mask that reads
the weights or the token values, or any other use of the intermediate products is refused with one
line saying why: a graph that would run without its mask is an error, never a full attention.
K and V heads that are copies of fewer heads (grouped attention that repeats its KV heads before
the products) are proved so on random probes and cut to the unique heads (_unique_heads), so the KV
cache is the size grouped attention needs.
"""
from __future__ import annotations

import torch

from .fx_nodes import insert_call
from .masks import MaskKind

aten = torch.ops.aten

# Q·Kᵀ and A·V products.
_PRODUCTS = {aten.matmul.default, aten.bmm.default}
_SOFTMAX = {aten.softmax.int, aten._softmax.default, aten._safe_softmax.default}
# Ops between the softmax and A·V that change no value (a dtype cast in the engine's own dtype is
# checked by the probe: the cast's target dtype must be floating).
_PASS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.clone.default,
         aten.contiguous.default, aten.alias.default, aten.detach.default, aten.to.dtype, aten._to_copy.default}
_CHECKS = {aten._assert_tensor_metadata.default}
MASKED = -1e4      # a bias at or below this is a hidden key (softmax weight exp(-1e4) = 0 in fp32)
PROBE_TOKENS = (5, 37, 300)  # token counts the bias is computed at (and the longest allowed, up to BIG)
BIG = 2048         # the longest prompt a mask is proved for; the context is bounded there (context_bound)


class NotAttention(Exception):
    """A candidate site that is not attention written by hand (not a refusal: some other softmax)."""


class Refused(Exception):
    """Attention written by hand that cannot be proved equivalent to the engine's attention op."""


def _users(n):
    return [u for u in n.users if u.target not in _CHECKS]


def _only_user(n):
    users = _users(n)
    if len(users) != 1:
        raise Refused(f"{n.name} ({n.target}) is used by {len(users)} nodes")
    return users[0]


def _last_axis(n) -> bool:
    dim = n.args[1]
    nd = n.meta["val"].dim()
    return dim in (-1, nd - 1)


class _Evaluator:
    """Concrete values of graph nodes that depend only on the token count and positions: user
    inputs are input_ids (random ids), position_ids/cache_position (0..T-1); buffers and lifted
    constants have their recomputed CPU values. A parameter (a weight) cannot be evaluated."""

    def __init__(self, ep, constants: dict, vocab: int):
        self.ep = ep
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
        self.constants = constants
        self.vocab = max(int(vocab or 0), 4)
        # When set, a node that reads a weight gets frontier(node) as its value (random probes)
        # instead of refusing: _head_groups evaluates what follows the model's weights.
        self.frontier = None

    def _is_weight(self, n) -> bool:
        spec = self.specs.get(n.name) if n.op == "placeholder" else None
        return spec is not None and spec.kind.name == "PARAMETER"

    def inputs(self, T: int, seed: int) -> dict:
        gen = torch.Generator().manual_seed(seed)
        env = {}
        for node in self.ep.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = self.specs[node.name]
            val = node.meta.get("val")
            if spec.kind.name == "USER_INPUT":
                if not isinstance(val, torch.Tensor):
                    continue
                if val.dtype.is_floating_point:
                    continue  # not evaluable: a site reading it is refused
                if "input_ids" in node.name:
                    env[node] = torch.randint(1, self.vocab, (1, T), generator=gen)
                elif val.dim() == 2:
                    env[node] = torch.arange(T).unsqueeze(0)
                else:
                    env[node] = torch.arange(T)
            elif spec.kind.name in ("BUFFER", "CONSTANT_TENSOR"):
                t = self.constants.get(spec.target)
                if t is None:
                    t = self.ep.constants.get(spec.target)
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    env[node] = t.clone()  # an in-place op in the graph must not change capture's copy
        return env

    def value(self, node, env: dict):
        if node in env:
            return env[node]
        if node.op == "placeholder":
            raise Refused(f"its mask or bias reads {node.name}, whose values capture does not know (a weight "
                          "or an input other than the tokens and positions)")
        if node.op != "call_function":
            raise Refused(f"its mask or bias reads a {node.op} node {node.name}")
        if self.frontier is not None and any(self._is_weight(a) for a in node.all_input_nodes):
            env[node] = self.frontier(node)
            return env[node]
        args = torch.fx.node.map_arg(node.args, lambda a: self.value(a, env))
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: self.value(a, env))
        cpu = torch.device("cpu")
        fix = lambda v: cpu if isinstance(v, torch.device) else v  # noqa: E731 - the model ran on meta
        args = tuple(fix(a) for a in args)
        kwargs = {k: fix(v) for k, v in kwargs.items()}
        if node.target in _CHECKS:
            out = None
        else:
            out = node.target(*args, **kwargs)
        env[node] = out
        return out


def _chain(start, softmax):
    """Nodes on a path from start to softmax (excluding both); each may be used only on them."""
    anc, stack = set(), [softmax]
    while stack:  # ancestors of the softmax
        for a in stack.pop().all_input_nodes:
            if a not in anc:
                anc.add(a)
                stack.append(a)
    on, stack = set(), [start]
    while stack:  # ... that descend from start
        for u in stack.pop().users:
            if u in anc and u not in on:
                on.add(u)
                stack.append(u)
    for n in on | {start}:
        for u in _users(n):
            if u not in on and u is not softmax:
                raise Refused(f"its scores {n.name} ({n.target}) are also used by {u.name} ({u.target})")
    return on


def _shape(val, T: int, tok) -> list[int]:
    out = []
    for d in val.shape:
        if isinstance(d, int):
            out.append(d)
        elif tok is not None and str(d) == str(tok):
            out.append(T)
        else:
            raise Refused(f"a score dimension {d} is not the token count")
    return out


class Site:
    """One attention written by hand: its products, softmax and the operands of the new op."""

    def __init__(self, softmax):
        self.softmax = softmax
        x = softmax.args[0]
        # forward: softmax -> value-preserving ops -> A·V
        n = softmax
        self.after = []
        while True:
            users = _users(n)
            if len(users) != 1:
                raise NotAttention(f"{n.name} has {len(users)} users")
            u = users[0]
            if u.target in _PRODUCTS and u.args[0] is n:
                self.av = u
                break
            if u.target is aten.dropout.default and (u.args[2] is False or float(u.args[1]) == 0.0):
                pass
            elif u.target not in _PASS:
                raise NotAttention(f"{softmax.name} is followed by {u.target}")
            self.after.append(u)
            n = u
        # backward: the nearest Q·Kᵀ product among the scores' ancestors on a single-input path
        stack, seen, found = [x], set(), []
        while stack:
            n = stack.pop()
            if n in seen or not isinstance(n, torch.fx.Node) or n.op != "call_function":
                continue
            seen.add(n)
            if n.target in _PRODUCTS or n.target is aten.baddbmm.default:
                found.append(n)
                continue
            stack.extend(a for a in n.all_input_nodes)
        if len(found) != 1:
            raise Refused(f"{len(found)} products reach its softmax ({', '.join(p.name for p in found)}), "
                          "not one Q·Kᵀ")
        self.qk = found[0]
        self.chain = _chain(self.qk, softmax)
        q, kt = (self.qk.args[1], self.qk.args[2]) if self.qk.target is aten.baddbmm.default else self.qk.args[:2]
        self.q, self.kt, self.v = q, kt, self.av.args[1]
        for t in (q, kt, self.v):
            if t.meta["val"].dim() not in (3, 4):
                raise Refused(f"operand {t.name} of {self.qk.name}/{self.av.name} is {t.meta['val'].dim()}-D")


def _scores_fn(site: Site, ev: _Evaluator, T: int, tok):
    """(G, P shape): G(P) evaluates the softmax input with the product replaced by P."""
    qk = site.qk
    if qk.target is aten.baddbmm.default:
        beta = qk.kwargs.get("beta", qk.args[3] if len(qk.args) > 3 else 1)
        alpha = qk.kwargs.get("alpha", qk.args[4] if len(qk.args) > 4 else 1)
        pshape = _shape(qk.meta["val"], T, tok)
    else:
        beta, alpha = 0, 1
        pshape = _shape(qk.meta["val"], T, tok)
    base = ev.inputs(T, seed=T)

    def G(P, seed=0):
        env = dict(base) if seed == 0 else ev.inputs(T, seed=seed + T)
        if qk.target is aten.baddbmm.default:
            inp = ev.value(qk.args[0], env)
            env[qk] = (beta * inp if beta != 0 else 0) + alpha * P
        else:
            env[qk] = P.clone()  # the scores may be scaled in place (div_)
        return ev.value(site.softmax.args[0], env)
    return G, pshape


def _prove(site: Site, ev: _Evaluator, T: int, tok) -> tuple[float, torch.Tensor, list[float] | None]:
    """(scale, visible [T, T], ALiBi slopes or None) of the site at T tokens, or Refused."""
    G, pshape = _scores_fn(site, ev, T, tok)
    dtype = site.qk.meta["val"].dtype
    with torch.no_grad():
        zero = torch.zeros(pshape, dtype=dtype)
        b = G(zero)
        if b.numel() != zero.numel() or b.shape[-1] != T or b.shape[-2] != T:
            raise Refused(f"its scores change shape between {site.qk.name} and the softmax ({list(b.shape)})")
        b2 = G(zero, seed=1)  # other token ids: the mask must not read them
        if not torch.equal(b, b2):
            raise Refused("its mask or bias depends on the token ids")
        bf = b.reshape(-1).double()
        masked = bf <= MASKED
        visible = ~masked
        gen = torch.Generator().manual_seed(T)
        scale = None
        for _ in range(2):
            P = torch.randn(pshape, generator=gen, dtype=torch.float64).mul(3).to(dtype)
            z = G(P).reshape(-1).double()
            p = P.reshape(-1).double()
            pv, zv = p[visible], z[visible] - bf[visible]
            s = float((pv * zv).sum() / (pv * pv).sum().clamp_min(1e-30))
            if scale is None:
                scale = s
            tol = 1e-5 * (1 + zv.abs().max().item()) if zv.numel() else 0
            if abs(s - scale) > 1e-6 * abs(scale) + 1e-12 or (zv - scale * pv).abs().max().item() > tol:
                raise Refused("the ops between Q·Kᵀ and the softmax are not a scale plus an additive mask "
                              "(a softcap or another non-linear function)")
            if masked.any() and torch.softmax(z.reshape(b.shape).double(), -1).reshape(-1)[masked].abs().max() != 0:
                raise Refused("a key its mask hides still gets softmax weight on a probe")
        if not torch.isfinite(bf[visible]).all():
            raise Refused("its bias is not finite where keys are visible")
        vis = visible.reshape(-1, T, T)
        if not (vis == vis[:1]).all():
            raise Refused("its mask differs between heads")
        heads = site.q.meta["val"].shape[-3]
        slopes = _alibi_slopes(bf.reshape(-1, T, T), vis[0], dtype) if (bf[visible] != 0).any() else None
        if slopes is not None and len(slopes) != heads:
            raise Refused(f"its bias has {len(slopes)} rows of heads but the query has {heads} heads")
        return scale, vis[0], slopes


def _alibi_slopes(b: torch.Tensor, visible: torch.Tensor, dtype) -> list[float]:
    """The per-head slopes s of a bias b [H, T, T] (float64) that is s[h]·k + r[h, q] on the visible
    keys (k: key position, r: any constant per row); Refused when it is not of that form.

    Rows are centred on their first visible key (removing r); the slope is the least-squares fit
    over every visible entry, and every entry must then match to the rounding of the model's dtype
    (the bias is computed in it: a few ulps of its largest magnitude)."""
    T = visible.shape[0]
    b = b.expand(b.shape[0], T, T)
    H = b.shape[0]
    keys = torch.arange(T, dtype=torch.float64)
    first = visible.double().argmax(-1)                       # [T] first visible key of each row
    zero = torch.zeros((), dtype=torch.float64)
    x = torch.where(visible, keys[None, :] - first[:, None].double(), zero)  # [T, T] k - k0 where visible
    d = torch.where(visible, b - b.gather(-1, first[None, :, None].expand(H, T, 1)), zero)  # b - b[k0]
    den = float((x * x).sum())
    if den == 0:
        raise Refused("it adds a bias to the visible scores but no row sees two keys to prove its form")
    slopes = (d * x).sum((-1, -2)) / den                       # [H]
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    top = float(b.masked_select(visible.expand(H, -1, -1)).abs().max())
    tol = 16 * eps * (1 + top)
    err = float(torch.where(visible, d - slopes[:, None, None] * x, zero).abs().max())
    if err > tol and err <= 2 * torch.finfo(torch.bfloat16).eps * (1 + top):
        # e.g. slopes cast to bfloat16 before the product: the model's own bias is a rounded line,
        # and the engine's exact slope·(k - q) would move the logits by up to err·scale
        raise Refused(f"it adds a bias to the visible scores that is slope[h] x key position only to the rounding "
                      f"of a 16-bit float (off by {err:.3g} at |bias| up to {top:.3g}): the engine adds the exact "
                      "line, so its logits would not match the model's")
    if err > tol:
        raise Refused(f"it adds a bias to the visible scores that is not an ALiBi bias slope[h] x key position "
                      f"(plus a constant per query row): off by {err:.3g} (a learned or relative bias?)")
    return [float(v) for v in slopes]


def _kind(visible: torch.Tensor) -> MaskKind:
    T = visible.shape[0]
    row = visible[T - 1]
    first = int(row.nonzero()[0]) if row.any() else T
    m = MaskKind("causal") if first == 0 else MaskKind("sliding", T - first)
    # the form must hold on every pair inside the probe, compared as whole [T, T] masks (a loop over
    # the pairs in Python took seconds a site at the longest probe)
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    want = k <= q
    if m.kind == "sliding":
        want = want & (k > q - m.size)
    bad = (visible.bool() != want).nonzero()
    if len(bad):
        qi, ki = (int(x) for x in bad[0])
        raise Refused(f"its mask at {T} tokens is neither causal nor a sliding window "
                      f"(query {qi} {'sees' if bool(visible[qi, ki]) else 'does not see'} key {ki})")
    return m


def _site_mask(site: Site, ev: _Evaluator, max_tokens: int, tok) -> tuple[float, MaskKind]:
    counts = sorted({min(t, max_tokens) for t in PROBE_TOKENS} | {min(max_tokens, BIG)})
    found = []
    for T in counts:
        if T < 2:
            continue
        found.append((T,) + _prove(site, ev, T, tok))
    # the scale is measured from fp32 (or narrower) scores, so equal scales agree to a few ulps of
    # that dtype, not to nine digits (mpt's fitted ALiBi bias leaves them 1e-9 apart)
    scales = sorted(s for _, s, _, _ in found)
    if scales[-1] - scales[0] > 1e-6 * max(abs(scales[0]), abs(scales[-1])):
        raise Refused(f"its scale differs between token counts ({[round(s, 9) for s in scales]})")
    slopes = found[0][3]
    for T, _, _, sl in found[1:]:
        same = (sl is None) == (slopes is None) and (sl is None or all(
            abs(a - b) <= 1e-6 * max(abs(a), abs(b)) + 1e-12 for a, b in zip(sl, slopes)))
        if not same:
            raise Refused(f"its ALiBi slopes differ between {found[0][0]} and {T} tokens ({slopes} vs {sl})")
    kinds = [(T, _kind(v)) for T, _, v, _ in found]
    T, last = kinds[-1]
    for t, k in kinds:
        if last.kind == "sliding" and k.kind == "causal" and t <= last.size:
            continue
        if k != last:
            raise Refused(f"its mask is {k.describe()} at {t} tokens but {last.describe()} at {T}")
    return found[0][1], last, slopes


def _four_d(graph, before, node, meta_from):
    """node as [1, H, T, D]: a 3-D [H, T, D] operand gets a leading batch of one (capture's batch)."""
    val = node.meta["val"]
    if val.dim() == 4:
        if val.shape[0] != 1:
            raise Refused(f"operand {node.name} has batch {val.shape[0]}, capture runs one")
        return node
    return insert_call(graph, before, aten.unsqueeze.default, (node, 0), meta_from, val.unsqueeze(0))


def _key(graph, site: Site):
    """K [.., T, D] from the Q·Kᵀ operand Kᵀ [.., D, T]."""
    kt = site.kt
    if kt.target is aten.transpose.int and kt.meta["val"].dim() in (3, 4):
        nd = kt.meta["val"].dim()
        dims = {d % nd for d in kt.args[1:3]}
        if dims == {nd - 1, nd - 2}:
            return kt.args[0]
    return insert_call(graph, site.qk, aten.transpose.int, (kt, -1, -2), site.softmax, kt.meta["val"].transpose(-1, -2))


GROUP_PROBE_TOKENS = (5, 37)


def _head_groups(node, ev: _Evaluator, tok) -> set[int]:
    """The group sizes g (dividing the head count H) for which head h of the 4-D operand node
    [1, H, T, D] holds the same values as head (h // g)·g, proved on random probes: node is
    evaluated with every op that reads a weight (a projection, a norm) given random values, and
    what follows them (splits, the repeat of KV heads by expand and reshape, rope from the positions,
    casts) computed from the graph. Heads that are copies of one head stay exactly equal for any
    values; heads computed from different weights or values differ on random ones. {1} when node
    cannot be evaluated so (it reads a value capture does not know)."""
    H = node.meta["val"].shape[1]
    if not isinstance(H, int) or H < 2:
        return {1}
    groups = {g for g in range(1, H + 1) if H % g == 0}
    try:
        for T in GROUP_PROBE_TOKENS:
            gen = torch.Generator().manual_seed(1000 + T)

            def frontier(n, T=T, gen=gen):
                val = n.meta.get("val")
                if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
                    raise Refused(f"{n.name} reads a weight and is no floating tensor")
                return torch.randn(_shape(val, T, tok), generator=gen, dtype=torch.float64).to(val.dtype)
            ev.frontier = frontier
            with torch.no_grad():
                vals = ev.value(node, ev.inputs(T, seed=T))
            if not isinstance(vals, torch.Tensor) or vals.dim() != 4 or vals.shape[1] != H:
                return {1}
            groups = {g for g in groups if all(torch.equal(vals[:, h], vals[:, h // g * g]) for h in range(H))}
    except (Refused, RuntimeError, TypeError, ValueError):
        return {1}
    finally:
        ev.frontier = None
    return groups


def _unique_heads(graph, ev: _Evaluator, tok, k, v, meta_from, fake_mode):
    """(k, v, g): the KV operands cut to their unique heads k[:, ::g], v[:, ::g] when their heads come
    in groups of g copies (_head_groups: grouped attention that repeats its KV heads before the
    products; the engine reads KV head h // g for query head h, which holds the same values), so the
    KV cache holds H/g heads, as grouped attention needs."""
    g = max(_head_groups(k, ev, tok) & _head_groups(v, ev, tok))
    if g == 1:
        return k, v, 1
    out = []
    for n in (k, v):
        H = n.meta["val"].shape[1]
        with fake_mode:
            fake = n.meta["val"][:, ::g]
        out.append(insert_call(graph, meta_from, aten.slice.Tensor, (n, 1, 0, H, g), meta_from, fake))
    return out[0], out[1], g


def rewrite(ep, constants: dict, vocab: int, max_tokens: int, tokens_symbol) -> list[str]:
    """Rewrites every attention written by hand in ep's graph into fuselm::attention (in place).

    Returns one line per site ("<module>: scale=… mask=…"). Raises Refused naming the site when one
    softmax over key positions is attention written by hand that cannot be proved. Layers are
    numbered in graph order.
    """
    from torch._guards import detect_fake_mode
    graph = ep.graph
    ev = _Evaluator(ep, constants, vocab)
    softmaxes = [n for n in graph.nodes if n.op == "call_function" and n.target in _SOFTMAX and _last_axis(n)]
    sites = []
    for sm in softmaxes:
        try:
            sites.append(Site(sm))
        except NotAttention:
            continue
    proofs = []
    for site in sites:
        try:
            proofs.append(_site_mask(site, ev, max_tokens, tokens_symbol))
        except Refused as e:
            raise Refused(f"attention written by hand in {_module_of(site.softmax)} (softmax {site.softmax.name}): "
                          f"{e}") from e
    report = []
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes if n.op == "placeholder"])
    for layer, (site, (scale, mask, slopes)) in enumerate(zip(sites, proofs)):
        where = _module_of(site.softmax)
        window = mask.size if mask.kind == "sliding" else -1
        q = _four_d(graph, site.qk, site.q, site.softmax)
        k = _four_d(graph, site.qk, _key(graph, site), site.softmax)
        v = _four_d(graph, site.av, site.v, site.softmax)
        k, v, group = _unique_heads(graph, ev, tokens_symbol, k, v, site.av, fake_mode)
        with fake_mode:
            out = torch.ops.fuselm.attention(q.meta["val"], k.meta["val"], v.meta["val"], None, float(scale),
                                             window, 0.0, layer, -1, mask.kind, slopes)
        att = insert_call(graph, site.av, torch.ops.fuselm.attention.default,
                      (q, k, v, None, float(scale), window, 0.0, layer, -1, mask.kind, slopes), site.softmax, out)
        res = insert_call(graph, site.av, aten.transpose.int, (att, 1, 2), site.softmax, out.transpose(1, 2))
        if site.av.meta["val"].dim() == 3:
            res = insert_call(graph, site.av, aten.squeeze.dim, (res, 0), site.softmax, out.transpose(1, 2).squeeze(0))
        site.av.replace_all_uses_with(res)
        _erase_site(graph, site)
        alibi = f" alibi_slopes=[{', '.join(f'{x:.6g}' for x in slopes)}]" if slopes else ""
        kv = f" kv_heads={k.meta['val'].shape[1]} (each repeated {group}x before the products)" if group > 1 else ""
        report.append(f"{where}: layer {layer} scale={scale:.6g} mask={mask.describe()}{alibi}{kv}")
    if sites:
        _drop_dead(graph)
    return report


def context_bound(config_context: int | None) -> tuple[int, str | None]:
    """(context, notice): the context a model whose masks were proved by rewrite() may run at.

    The masks are proved on probes of up to BIG tokens, so a longer context, or none named by the
    config (ALiBi checkpoints name none: their bias has no table that bounds it), runs at BIG tokens;
    the notice says so, naming where the bound comes from. The engine refuses a longer prompt with the
    context's usual error. A config bound at or under BIG is kept as it is (notice None)."""
    if config_context is not None and config_context <= BIG:
        return config_context, None
    named = (f"its config's context of {config_context} tokens" if config_context is not None
             else "its config names no context length")
    return BIG, (f"context bounded at {BIG} tokens: the masks written by hand are proved on probes of up to {BIG} "
                 f"tokens ({named}); a longer prompt is refused")


def _erase_site(graph, site: Site) -> None:
    """Erases the site's old nodes (A·V back to Q·Kᵀ, each used only inside the site)."""
    for n in [site.av] + site.after[::-1] + [site.softmax] + _topo_reverse(site.chain) + [site.qk]:
        for u in list(n.users):
            if u.target in _CHECKS:
                graph.erase_node(u)
        graph.erase_node(n)


def _topo_reverse(nodes):
    order = {n: i for i, n in enumerate(next(iter(nodes)).graph.nodes)} if nodes else {}
    return sorted(nodes, key=lambda n: -order[n])


def _drop_dead(graph) -> None:
    """Removes what the rewritten sites left unused (their scores, masks and checks on them)."""
    changed = True
    while changed:
        changed = False
        for n in reversed(list(graph.nodes)):
            if n.op != "call_function" or n.users:
                continue
            if n.target in _CHECKS or not n.is_impure() or n.target is aten.detach_.default:
                graph.erase_node(n)
                changed = True
    graph.lint()


def _module_of(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<root>"
    path, cls = list(stack.values())[-1]
    name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
    return f"{path} ({name})"





def on_fake_cpu(model: torch.nn.Module, example: dict) -> dict:
    """Moves model's meta parameters and buffers to fake CPU tensors (shapes, no storage) and returns
    example as fake CPU tensors of the same mode; torch.export then traces on the CPU device.

    On the meta device, a constant that a forward creates from Python values (a mask's fill value,
    a list used as an index) is lifted without its value, so a mask reading it could not be proved
    and an index could not be written; traced on fake CPU tensors, torch.export keeps their values.
    Non-persistent buffers keep the values capture recomputed before (constants)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    moved: dict[int, torch.Tensor] = {}  # one fake per tensor: tied weights stay one tensor
    with mode:
        for mod in model.modules():
            for store in (mod._parameters, mod._buffers):
                for k, t in list(store.items()):
                    if t is None or t.device.type != "meta":
                        continue
                    if id(t) not in moved:
                        fake = torch.empty(t.shape, dtype=t.dtype, device="cpu")
                        moved[id(t)] = torch.nn.Parameter(fake, requires_grad=False) if store is mod._parameters else fake
                    store[k] = moved[id(t)]
        return {k: torch.empty(v.shape, dtype=v.dtype, device="cpu") for k, v in example.items()}


def _numpy_t(x):
    return x.permute(*reversed(range(x.dim())))


def _index(x, indices):
    """x[..., idx, ...] with one 1-D integer index tensor: index_select, negative indices wrapped."""
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) != 1 or used[0][1].dim() != 1 or used[0][1].dtype not in (torch.int64, torch.int32):
        return NotImplemented
    d, idx = used[0]
    idx = torch.where(idx < 0, idx + x.shape[d], idx)
    return torch.index_select(x, d, idx)


def bridge_decompositions(ep):
    """ep with aten.repeat, aten.numpy_T (x.T) and aten.index.Tensor over one axis (x[:, [i]])
    decomposed into view and index_select ops the engine runs.

    A bridge for the eager captures of this module only, where rotary tables and linears by hand
    bring those two ops: capture's general decomposition of everything outside the engine's op set
    (issue 15 item 1) supersedes it. run_decompositions re-traces the graph (fuselm ops stay)."""
    from torch._decomp import get_decompositions
    present = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    table = {op: fn for op, fn in get_decompositions([aten.repeat.default]).items() if op in present}
    if aten.numpy_T.default in present:
        table[aten.numpy_T.default] = _numpy_t
    if aten.index.Tensor in present:
        table[aten.index.Tensor] = _index
    return ep.run_decompositions(table) if table else ep
