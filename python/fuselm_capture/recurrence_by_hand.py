"""A per-channel recurrence written inline token by token, found by dataflow, proved on probes and
rewritten into fuselm::decay_softmax_scan or fuselm::linear_scan; token shifts (a zero pad of one
end of the tokens, the other end cut) and causal depthwise convolutions (padded by K - 1, cut to
the first T outputs) rewritten into fuselm::causal_conv1d.

A loop over the tokens in Python has no kernel dispatch point: torch.export unrolls it and fixes
the token count even in a bounded export. Capture then (docs/recurrent.md):

1. Exports at two fixed lengths, T1 and T2. In each graph a site is a tensor Y [1, T, C] whose T
   token rows are each written once (copy_ into select(Y, 1, t)). Its region is what the written
   rows are computed from, up to the token-wide sources [1, T, C] the loop reads a row of per token
   (select(X, 1, t)) and to the parameters and buffers it reads (its roots); a token-wide tensor
   read whole is refused.
2. Proof, on probes: the region is evaluated from probe values of its two sources and random
   values of its roots, in float64 (every floating cast of the steps is read as float64).
   A decayed softmax scan (sources k, v in one of the two orders): k = 0 and v = the first
   token's indicator give u = log((1 - y1) / y1) and w = log(y2 (1 + e^u) / (1 - y2)) per channel
   (y1, y2: the outputs at tokens 1 and 2); w and u must each be the value of one node of C values
   in the region that does not depend on the tokens (a decay computed from a parameter, a bonus
   parameter), and random k, v and roots must then give
       y[t] = sum_{s<=t} e^{l(t,s)} v[s] / sum_{s<=t} e^{l(t,s)},  l(t,s) = k[s] + (t-1-s)·w for
       s < t, l(t,t) = k[t] + u.
   Otherwise a diagonal linear scan y[t] = a[t]·y[t-1] + b[t] from zeros: a and b fitted per token
   from two probes that differ in the first token only, each matched to one source, then random
   sources and roots must give the scan of those sources. Both to float64 rounding at both
   lengths; any other recurrence, a gate computed in the loop, a third tensor read fails.
3. Rewrite and lift. Y becomes decay_softmax_scan(k, v, w, u) or linear_scan(a, b) in the T1
   graph; a token shift pad(x [1, T, C], (.., a, -a)) with zeros becomes causal_conv1d over the
   tokens with the weight e_0 of width a + 1 (x[t - a], zeros before the sequence: the conv's
   fresh state), a causal depthwise convolution causal_conv1d with its own weight. The T2 graph,
   rewritten the same way, must have the same ops and arguments but for integers the token count
   fixes, which become α·T + β of it; the model is traced once more over the full range with the
   sites' loops cut to one step (`range` over a symbolic count in their source files), which must
   fix the length nowhere (a branch on the length elsewhere, at 1 token or beyond some chunk,
   which the two lengths cannot see, is refused naming its module); and the T1 graph is exported
   once more over the full range.
"""
from __future__ import annotations

import contextlib
import math

import torch

aten = torch.ops.aten

LENGTHS = (4, 7)    # the two fixed lengths (the fit reads tokens 0 to 2; short: the loop is unrolled)
OUT_TOL = 1e-9      # |y - expected| <= OUT_TOL * (1 + |expected|) (float64 steps against float64)
FIT_TOL = 1e-7      # |fitted - invariant| <= FIT_TOL * (1 + |invariant|) (logs of float64 ratios)
_SKIP = {aten._assert_tensor_metadata.default}


class NotRecurrence(Exception):
    """A length-specialised forward that is not provably a recurrence fuselm can run."""


def _path(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def _where(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<root>"
    path, cls = list(stack.values())[-1]
    return f"{path} ({cls.__name__ if isinstance(cls, type) else str(cls).rsplit('.', 1)[-1]})"


def _shape(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _token_row(node, T: int):
    """(X, t) when node is select(X, 1, t) of X [1, T, C]; None otherwise."""
    if node.op != "call_function" or node.target is not aten.select.int:
        return None
    x, dim, t = node.args[:3]
    shape = _shape(x)
    if shape is None or len(shape) != 3 or shape[:2] != (1, T) or dim not in (1, -2) or not isinstance(t, int):
        return None
    return x, t % T


def _written_rows(graph, T: int) -> dict:
    """Y -> [row value per token] for every Y [1, T, C] whose T rows are each written once (copy_
    into select(Y, 1, t)); the copies are recorded as the rows' writers."""
    rows: dict = {}
    for n in graph.nodes:
        if n.op == "call_function" and n.target is aten.copy_.default:
            hit = _token_row(n.args[0], T)
            if hit is not None:
                rows.setdefault(hit[0], {}).setdefault(hit[1], []).append(n)
    return {y: by_t for y, by_t in rows.items() if sorted(by_t) == list(range(T))
            and all(len(w) == 1 for w in by_t.values())}


class Site:
    """One recurrence written inline: Y [1, T, C], the copies writing its rows, its two sources
    [1, T, C], the nodes the rows are computed by (region, in graph order), the roots it reads
    otherwise (parameters, buffers: probed at random values) and its per-channel values (nodes of C
    values not depending on the tokens: where a decay or a bonus is looked for)."""

    def __init__(self, gm, y, writers: dict, T: int):
        self.gm, self.y, self.T = gm, y, T
        self.copies = [writers[t][0] for t in range(T)]
        self.rows = [c.args[1] for c in self.copies]
        self.where = _where(self.copies[0])
        self.channels = C = _shape(y)[2]
        region, sources, stack = set(), set(), list(self.rows)
        while stack:  # the rows' ancestors, up to the sources and the roots
            n = stack.pop()
            if n in region or n in sources:
                continue
            hit = _token_row(n, T)
            if hit is not None and hit[0] is not y:
                sources.add(hit[0])
            elif n.op in ("placeholder", "get_attr") or _is_tokens(n, T):
                if n.op not in ("placeholder", "get_attr"):
                    raise NotRecurrence(f"{self.where}: its steps read {n.name} {list(_shape(n))} whole, not a row "
                                        "per token")
            region.add(n)
            stack.extend(a for a in n.all_input_nodes if a not in sources)
        dep = set()
        for n in y.graph.nodes:
            row_of = (_token_row(n, T) or (None,))[0]
            if n in region and (row_of in sources or any(a in dep for a in n.all_input_nodes)):
                dep.add(n)
        missing = [r for r in self.rows if r not in dep]
        if missing:
            raise NotRecurrence(f"{self.where}: row {missing[0].name} of {y.name} does not depend on the tokens")
        self.sources = sorted(sources, key=lambda n: n.name)
        if len(self.sources) != 2:
            raise NotRecurrence(f"{self.where}: its steps read rows of {len(self.sources)} token-wide tensors, "
                                "not two (a key and a value)")
        for src in self.sources:
            if _shape(src) != (1, T, C):
                raise NotRecurrence(f"{self.where}: source {src.name} is {list(_shape(src))}, not [1, {T}, {C}]")
        self.region = [n for n in y.graph.nodes if n in region]
        self.roots = [n for n in self.region if n.op in ("placeholder", "get_attr")]
        self.per_channel = [n for n in self.region if n not in dep and self._numel(n) == C]

    def _numel(self, n) -> int:
        shape = self.shape(n)
        return math.prod(shape) if shape is not None and (not shape or shape[-1] == self.channels) else -1

    def shape(self, n):
        """n's shape (a get_attr's from the module's tensor); None for a non-tensor."""
        if n.op == "get_attr":
            t = _attr(self.gm, n.target)
            return tuple(t.shape) if isinstance(t, torch.Tensor) else None
        return _shape(n)


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _is_tokens(n, T: int) -> bool:
    shape = _shape(n)
    return shape is not None and len(shape) >= 2 and shape[1] == T and shape[0] == 1 and len(shape) == 3


def find_sites(gm, T: int) -> list[Site]:
    """Every site of gm exported at T tokens (NotRecurrence naming one that is malformed)."""
    return [Site(gm, y, w, T) for y, w in _written_rows(gm.graph, T).items()]


# ---- the proof on probes -------------------------------------------------------------------------

def evaluate(site: Site, sources: dict, seed: int) -> tuple:
    """(Y [1, T, C], values of the site's nodes) from probe values (node -> tensor) of the sources
    and random values (N(0, 1/4), seeded) of its roots, in float64 (every floating dtype the steps
    cast to is read as float64: what is proved is the function, whatever the model's precision)."""
    gen = torch.Generator().manual_seed(seed)
    env = dict(sources)

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, torch.device):  # capture traced on the meta device; the probes run on the CPU
            return torch.device("cpu")
        if isinstance(a, torch.dtype) and a.is_floating_point:  # the function proved, not its rounding
            return torch.float64
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a
    with torch.no_grad():
        for n in site.region:
            if n in env or n.target in _SKIP:
                continue
            if n in site.roots:
                shape = site.shape(n)
                if shape is None:
                    raise NotRecurrence(f"{site.where}: its steps read {n.name}, which is not a tensor")
                env[n] = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
                continue
            try:
                env[n] = n.target(*arg(n.args), **{k: arg(v) for k, v in n.kwargs.items()})
            except Exception as e:  # noqa: BLE001 - an op the probes cannot run: not proved
                from .messages import reason
                raise NotRecurrence(f"{site.where}: its step {n.name} ({n.target}) does not run on probes: "
                                    f"{type(e).__name__}: {reason(str(e))}") from e
    return torch.stack([env[r].reshape(-1) for r in site.rows]).unsqueeze(0), env


def expected(k, v, w, u) -> torch.Tensor:
    """The decayed softmax scan by its definition, in float64 (k, v [1, T, C], w, u [C])."""
    k, v, w, u = (x.double() for x in (k, v, w, u))
    T = k.shape[1]
    t = torch.arange(T)
    dist = (t[:, None] - 1 - t[None, :]).double()                          # t - 1 - s
    logit = k[0].T[:, None, :] + dist[None] * w[:, None, None]             # [C, t, s]
    logit = torch.where((t[:, None] == t[None, :])[None], (k[0] + u).T[:, :, None].expand_as(logit), logit)
    logit = logit.masked_fill((t[None, :] > t[:, None])[None], -math.inf)
    return torch.einsum("cts,sc->tc", torch.softmax(logit, -1), v[0]).unsqueeze(0)


def _randoms(shapes, seed: int, scale: float):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=torch.float64) * scale for s in shapes]


def _match(fit: torch.Tensor, site: Site, env: dict, what: str):
    """The first per-channel value of the site equal to fit (to FIT_TOL)."""
    for n in site.per_channel:
        val = env.get(n)
        if isinstance(val, torch.Tensor) and val.is_floating_point():
            val = val.reshape(-1).double()
            if bool(((fit - val).abs() <= FIT_TOL * (1 + val.abs())).all()):
                return n
    raise NotRecurrence(f"{site.where}: the {what} its steps apply is none of the per-channel values they read")


def _fit(site: Site, kn, vn):
    """(w node, u node) from k = 0, v = the first token's indicator; NotRecurrence if none fits."""
    T, C = site.T, site.channels
    v = torch.zeros(1, T, C, dtype=torch.float64)
    v[:, 0] = 1
    y, env = evaluate(site, {kn: torch.zeros_like(v), vn: v}, seed=1)
    y1, y2 = y[0, 1].double(), y[0, 2].double()
    if not bool(((y1 > 0) & (y1 < 1) & (y2 > 0) & (y2 < 1)).all()):
        raise NotRecurrence(f"{site.where}: the first token's weight at tokens 1 and 2 is not a share of a softmax")
    u = torch.log((1 - y1) / y1)
    w = torch.log(y2 * (1 + u.exp()) / (1 - y2))
    return _match(w, site, env, "log decay"), _match(u, site, env, "current token's bonus")


def _prove_softmax(site: Site) -> tuple:
    """(k node, v node, w node, u node) of a decayed softmax scan, verified on random probes."""
    C, T = site.channels, site.T
    failures = []
    for kn, vn in (site.sources, site.sources[::-1]):
        try:
            wn, un = _fit(site, kn, vn)
            for seed in (2, 3):
                k, v = _randoms([(1, T, C), (1, T, C)], seed + 10, 2.0)
                got, env = evaluate(site, {kn: k, vn: v}, seed)
                want = expected(k, v, env[wn].reshape(-1), env[un].reshape(-1))
                err = float(((got.double() - want).abs() / (1 + want.abs())).max())
                if err > OUT_TOL:
                    raise NotRecurrence(f"{site.where}: its output is not the decayed softmax scan of {kn.name} "
                                        f"(keys) and {vn.name} (values): off by {err:.3g} at {T} tokens")
            return kn, vn, wn, un
        except NotRecurrence as e:
            failures.append(str(e))
    raise NotRecurrence(failures[0])


def linear_scan(a, b) -> torch.Tensor:
    """h[t] = a[t]·h[t-1] + b[t] from h = 0, in float64 (a, b [1, T, C])."""
    h = torch.zeros(b.shape[2], dtype=torch.float64)
    out = torch.empty(b.shape, dtype=torch.float64)
    for t in range(b.shape[1]):
        h = a[0, t].double() * h + b[0, t].double()
        out[0, t] = h
    return out


def _same(fit: torch.Tensor, val: torch.Tensor) -> bool:
    return bool(((fit - val).abs() <= FIT_TOL * (1 + val.abs())).all())


def _fit_linear(site: Site) -> tuple:
    """(a node, b node): the decay and input per token fitted from two probes that differ in the
    first token only (the difference of their rows decays by a[t] at each later step; b[t] is then
    what a[t]·y[t-1] leaves of y[t]), each matched to one of the two token-wide sources."""
    T, C = site.T, site.channels
    p = _randoms([(1, T, C), (1, T, C)], 21, 1.0)
    q = [x.clone() for x in p]
    for x, first in zip(q, _randoms([(1, C), (1, C)], 22, 1.0)):
        x[:, 0] = first
    yp, _ = evaluate(site, dict(zip(site.sources, p)), seed=1)
    yq, _ = evaluate(site, dict(zip(site.sources, q)), seed=1)
    yp, d = yp.double()[0], (yp.double() - yq.double())[0]
    if not bool((d[0] != 0).all()):
        raise NotRecurrence(f"{site.where}: its first row does not depend on the first token")
    a = d[1:] / d[:-1]
    b = torch.cat([yp[:1], yp[1:] - a * yp[:-1]])
    vals = {n: x[0].double() for n, x in zip(site.sources, p)}
    an = next((n for n in site.sources if _same(a, vals[n][1:])), None)
    bn = next((n for n in site.sources if n is not an and _same(b, vals[n])), None)
    if an is None or bn is None:
        raise NotRecurrence(f"{site.where}: the {'decay' if an is None else 'input'} its steps apply is neither of the "
                            "token-wide values they read a row of")
    return an, bn


def _prove_linear(site: Site) -> tuple:
    """(a node, b node) of a diagonal linear scan y = scan(a, b), verified on random probes."""
    an, bn = _fit_linear(site)
    T, C = site.T, site.channels
    for seed in (2, 3):
        a, b = _randoms([(1, T, C), (1, T, C)], seed + 20, 1.0)
        got, _ = evaluate(site, {an: a, bn: b}, seed)
        want = linear_scan(a, b)
        err = float(((got.double() - want).abs() / (1 + want.abs())).max())
        if err > OUT_TOL:
            raise NotRecurrence(f"{site.where}: its output is not the linear scan of {an.name} (decays) and "
                                f"{bn.name} (inputs): off by {err:.3g} at {T} tokens")
    return an, bn


def prove(site: Site) -> tuple:
    """("softmax", (k, v, w, u)) or ("linear", (a, b)): the site's recurrence and its nodes,
    verified on random probes; NotRecurrence saying why it is neither."""
    try:
        return "softmax", _prove_softmax(site)
    except NotRecurrence as e:
        softmax = str(e)
    try:
        return "linear", _prove_linear(site)
    except NotRecurrence as e:
        where = f"{site.where}: "
        raise NotRecurrence(f"{where}not a decayed softmax scan: {softmax.removeprefix(where)}; not a linear scan: "
                            f"{str(e).removeprefix(where)}") from e


# ---- rewrite ------------------------------------------------------------------------------------

def _meta_from(node, like):
    node.meta = {key: val for key, val in like.meta.items() if key in ("nn_module_stack", "stack_trace")}


def _rewrite_site(gm, site: Site, kind: str, roles: tuple) -> None:
    """Y of the site -> decay_softmax_scan(k, v, w, u) or linear_scan(a, b) (kind, roles: the
    proved nodes), its row copies erased; what the rows were computed from is left for _drop_dead."""
    from . import recurrent_ops  # noqa: F401 - registers torch.ops.fuselm's scans
    g = gm.graph
    writes = set(site.copies) | {c.args[0] for c in site.copies}
    last = site.copies[-1]
    new = []
    if kind == "linear":
        with g.inserting_after(last):
            out = g.call_function(torch.ops.fuselm.linear_scan.default, (*roles, 0))
    else:
        kn, vn, wn, un = roles
        with g.inserting_after(last):
            w = g.call_function(aten.reshape.default, (wn, [site.channels]))
        with g.inserting_after(w):
            u = g.call_function(aten.reshape.default, (un, [site.channels]))
        with g.inserting_after(u):
            out = g.call_function(torch.ops.fuselm.decay_softmax_scan.default, (kn, vn, w, u, 0))
        new = [w, u]
    for n in new + [out]:
        _meta_from(n, last)
    site.y.replace_all_uses_with(out, delete_user_cb=lambda user: user not in writes and user is not out)
    for c in reversed(site.copies):
        g.erase_node(c)


_PADS = (aten.pad.default, aten.constant_pad_nd.default)


def _shift(node, T: int):
    """(x, a) when node pads x [1, T, C] along the tokens by a zeros in front and cuts a at the end
    (a token shift: row t reads x[t - a]); None otherwise (NotRecurrence for another pad of the
    tokens: it would mix the tokens of the batch's sequences)."""
    if node.op != "call_function" or node.target not in _PADS:
        return None
    x, pads = node.args[0], list(node.args[1])
    shape = _shape(x)
    on_tokens = shape is not None and len(shape) >= 2 and shape[1] == T and len(pads) >= 2 * (len(shape) - 1) \
        and any(pads[2 * (len(shape) - 2):2 * (len(shape) - 1)])
    if not on_tokens:
        return None
    if shape[0] != 1:
        raise NotRecurrence(f"{_where(node)}: pads the tokens of {list(shape)} (not [1, T, C])")
    mode = node.args[2] if len(node.args) > 2 and node.target is aten.pad.default else "constant"
    value = node.args[-1] if len(node.args) > (3 if node.target is aten.pad.default else 2) else 0
    if mode != "constant" or value not in (0, 0.0, None) or len(shape) != 3 or len(pads) != 4 \
            or pads[:2] != [0, 0] or pads[2] <= 0 or pads[3] != -pads[2]:
        raise NotRecurrence(f"{_where(node)}: pads the tokens by {pads} ({mode}, {value}), which is no token shift "
                            "(zeros in front, as many cut at the end)")
    return x, pads[2]


def _rewrite_shifts(gm, T: int) -> list[str]:
    """Each token shift of gm (at T tokens) -> transpose(causal_conv1d(x over the tokens, weight
    e_0 of width a + 1), 1, 2): row t reads x[t - a], zeros before the sequence (the conv's fresh
    state), its last a rows carried in the conv's state. Report lines."""
    g = gm.graph
    done = []
    for i, n in enumerate([n for n in g.nodes if _shift(n, T) is not None]):
        x, a = _shift(n, T)
        C = _shape(x)[2]
        name = f"_fuselm_token_shift_{i}"
        weight = torch.zeros(C, a + 1, dtype=x.meta["val"].dtype)
        weight[:, 0] = 1
        gm.register_buffer(name, weight, persistent=False)
        with g.inserting_before(n):
            xt = g.call_function(aten.transpose.int, (x, 1, 2))
            wt = g.get_attr(name)
            y = g.call_function(torch.ops.fuselm.causal_conv1d.default, (xt, wt, None, "none", 0))
            res = g.call_function(aten.transpose.int, (y, 1, 2))
        for m in (xt, wt, y, res):
            _meta_from(m, n)
        n.replace_all_uses_with(res)
        g.erase_node(n)
        done.append(f"{_where(res)}: a token shift by {a} as a causal convolution")
    return done


_CONVS = (aten.conv1d.default, aten.convolution.default)


def _token_conv(node, T: int):
    """(x, weight, bias, K) when node is a depthwise convolution over the tokens of x [1, C, T]
    (weight [C, 1, K], stride and dilation 1) padded by K - 1 on both sides, every use of it a slice
    of its first T outputs: a causal convolution (output t reads x[t - K + 1 .. t]). None when node
    is no convolution over the tokens, or one of width 1; NotRecurrence for another one (a look
    ahead, strides, or the padded outputs read, would mix the batch's sequences)."""
    if node.op != "call_function" or node.target not in _CONVS:
        return None
    x, w, bias = node.args[:3]
    shape = _shape(x)
    wshape = tuple(_attr(w.graph.owning_module, w.target).shape) if w.op == "get_attr" else _shape(w)
    if shape is None or len(shape) != 3 or shape[2] != T or wshape is None or len(wshape) != 3 or wshape[2] == 1:
        return None
    rest = list(node.args[3:]) + [None] * 6
    if node.target is aten.conv1d.default:
        stride, padding, dilation, groups = (rest[0] or [1]), (rest[1] or [0]), (rest[2] or [1]), (rest[3] or 1)
        transposed = False
    else:
        stride, padding, dilation, transposed, groups = rest[0], rest[1], rest[2], rest[3], rest[5]
    K, C = wshape[2], shape[1]
    users_cut = all(u.target is aten.slice.Tensor and _slice_args(u) in ((2, 0, T, 1), (-1, 0, T, 1))
                    for u in node.users)
    if shape[0] != 1 or transposed or list(stride) != [1] or list(dilation) != [1] or list(padding) != [K - 1] \
            or groups != C or tuple(wshape[:2]) != (C, 1) or not users_cut:
        raise NotRecurrence(f"{_where(node)}: a convolution over the tokens (weight {list(wshape)}, padding "
                            f"{list(padding)}, stride {list(stride)}, groups {groups}) that is no causal depthwise "
                            f"convolution read at its first {T} outputs")
    return x, w, bias, K


def _slice_args(node) -> tuple:
    """(dim, start, end, step) of aten.slice.Tensor, defaults filled in (start None read as 0)."""
    dim, start, end, step = (list(node.args[1:]) + [0, None, None, 1][len(node.args) - 1:])[:4]
    return dim, start or 0, end, step


def _rewrite_token_convs(gm, T: int) -> list[str]:
    """Each causal depthwise convolution over the tokens (a conv padded by K - 1 and cut to its
    first T outputs) -> causal_conv1d(x, weight [C, K], bias): its last K - 1 inputs carried in the
    conv's state, zeros before the sequence as the padding. Report lines."""
    g = gm.graph
    done = []
    for n in [n for n in g.nodes if _token_conv(n, T) is not None]:
        x, w, bias, K = _token_conv(n, T)
        C = _shape(x)[1]
        with g.inserting_before(n):
            wk = g.call_function(aten.reshape.default, (w, [C, K]))
            y = g.call_function(torch.ops.fuselm.causal_conv1d.default, (x, wk, bias, "none", 0))
        for m in (wk, y):
            _meta_from(m, n)
        for cut in list(n.users):
            cut.replace_all_uses_with(y)
            g.erase_node(cut)
        g.erase_node(n)
        done.append(f"{_where(y)}: a causal depthwise convolution of width {K} over the tokens")
    return done


_IN_PLACE = {aten.div_.Tensor: aten.div.Tensor, aten.div_.Scalar: aten.div.Scalar, aten.mul_.Tensor: aten.mul.Tensor,
             aten.mul_.Scalar: aten.mul.Scalar}


def _functional_weight_updates(gm) -> list[str]:
    """A parameter scaled in place by the forward (a weight rescaled at the first forward in eval
    mode, once for the model's life): the engine runs the graph every step, so the scaled copy
    becomes a value the later reads take (the weights as the model holds them after that forward)
    and the stored parameter is left as read. A scale by 1 is dropped. Another in-place op on a
    parameter is refused."""
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    done = []
    for n in list(g.nodes):
        if n.op != "call_function" or not n.args or not isinstance(n.args[0], torch.fx.Node) \
                or n.args[0].op != "get_attr":
            continue
        schema = getattr(n.target, "_schema", None)
        if schema is None or not schema.arguments or not schema.arguments[0].alias_info \
                or not schema.arguments[0].alias_info.is_write:
            continue
        p, scale = n.args[0], n.args[1] if len(n.args) > 1 else None
        if n.target not in _IN_PLACE or isinstance(scale, torch.fx.Node) and any(
                a.op == "placeholder" for a in scale.all_input_nodes):
            raise NotRecurrence(f"{_where(n)}: its forward changes parameter {p.target} in place ({n.target})")
        if scale != 1:
            with g.inserting_before(n):
                new = g.call_function(_IN_PLACE[n.target], n.args, n.kwargs)
            _meta_from(new, n)
            new.meta["val"] = n.meta.get("val")
            for user in [u for u in p.users if u is not n and order.get(u, -1) > order[n]]:
                user.replace_input_with(p, new)
            done.append(f"{_where(n)}: parameter {p.target} scaled by the forward ({n.target}, {scale}) as a value")
            n.replace_all_uses_with(new)
        else:
            n.replace_all_uses_with(p)
        g.erase_node(n)
    return done


def _rewritten(ep, T: int) -> tuple:
    """(graph module, report, module paths of the sites) of a fixed-length export with its sites and
    shifts rewritten."""
    from .attn_by_hand import _drop_dead
    gm = ep.module(check_guards=False)
    sites = find_sites(gm, T)
    if not sites:
        raise NotRecurrence(f"no tensor of the tokens is written row by row at {T} tokens")
    report = []
    for site in sites:
        kind, roles = prove(site)
        _rewrite_site(gm, site, kind, roles)
        if kind == "linear":
            report.append(f"{site.where}: a linear scan (decays {roles[0].name}, inputs {roles[1].name}) proved at "
                          f"{T} tokens")
        else:
            report.append(f"{site.where}: a decayed softmax scan (keys {roles[0].name}, values {roles[1].name}, "
                          f"decay {roles[2].name}, bonus {roles[3].name}) proved at {T} tokens")
    report += _rewrite_shifts(gm, T)
    report += _rewrite_token_convs(gm, T)
    report += _functional_weight_updates(gm)
    _drop_dead(gm.graph)
    gm.recompile()
    return gm, report, {_path(site.copies[0]) for site in sites}


class _Lift:
    """The integers of a graph exported at t1 tokens that the same graph exported at t2 holds as
    other values, as α·T + β of the token count T (α, β integers fitted from the two; the value at
    t1 must be α·t1 + β): nodes reading T from the input the dynamic shapes name."""

    def __init__(self, gm1, gm2, t1: int, t2: int, dynamic_shapes: dict):
        self.g, self.t1, self.t2 = gm1.graph, t1, t2
        self.i1 = {n: i for i, n in enumerate(gm1.graph.nodes)}
        self.i2 = {n: i for i, n in enumerate(gm2.graph.nodes)}
        self.dynamic, self.exprs, self.tokens, self.count = dynamic_shapes or {}, {}, None, 0

    def _token_count(self):
        if self.tokens is None:
            placeholders = [n for n in self.g.nodes if n.op == "placeholder"]
            name, dims = next(iter(self.dynamic.items()))
            ph = next(n for n in placeholders if n.name == name or n.target == name)
            with self.g.inserting_after(placeholders[-1]):
                self.tokens = self.g.call_function(aten.sym_size.int, (ph, next(iter(dims))))
        return self.tokens

    def _expr(self, alpha: int, beta: int):
        import operator
        if (alpha, beta) not in self.exprs:
            last = node = self._token_count()
            for op, k in ((operator.mul, alpha), (operator.add, beta)):
                if k != (1 if op is operator.mul else 0):
                    with self.g.inserting_after(last):
                        node = last = self.g.call_function(op, (node, k))
            self.exprs[alpha, beta] = node
        return self.exprs[alpha, beta]

    def merge(self, a, b):
        """a (gm1's argument) with its length integers lifted; ValueError where b differs otherwise."""
        if isinstance(a, torch.fx.Node):
            if not isinstance(b, torch.fx.Node) or self.i1[a] != self.i2[b]:
                raise ValueError
            return a
        if isinstance(a, (list, tuple)):
            if not isinstance(b, (list, tuple)) or len(a) != len(b):
                raise ValueError
            return type(a)(self.merge(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            if not isinstance(b, dict) or sorted(a) != sorted(b):
                raise ValueError
            return {k: self.merge(v, b[k]) for k, v in a.items()}
        if type(a) is int and type(b) is int and a != b:
            alpha, rem = divmod(b - a, self.t2 - self.t1)
            if rem:
                raise ValueError
            self.count += 1
            return self._expr(alpha, a - alpha * self.t1)
        if type(a) is not type(b) or a != b:
            raise ValueError
        return a

    def run(self, gm2) -> int:
        """Lifts every argument of gm1 (NotRecurrence naming the first node where the graphs differ
        otherwise); the number of integers lifted."""
        n1, n2 = list(self.g.nodes), list(gm2.graph.nodes)
        for i, (a, b) in enumerate(zip(n1, n2)):
            try:
                if (a.op, str(a.target)) != (b.op, str(b.target)):
                    raise ValueError
                args, kwargs = self.merge(a.args, b.args), self.merge(a.kwargs, b.kwargs)
            except ValueError:
                raise NotRecurrence(f"the rewritten graphs at {self.t1} and {self.t2} tokens differ at {a.name} "
                                    f"({_where(a)}): something else depends on the length") from None
            a.args, a.kwargs = args, kwargs
        if len(n1) != len(n2):
            where = n1[min(len(n1), len(n2)) - 1]
            raise NotRecurrence(f"the rewritten graphs at {self.t1} and {self.t2} tokens differ after {where.name} "
                                f"({_where(where)}): something else depends on the length")
        return self.count


def capture(module, kwargs: dict, dynamic_shapes: dict, export) -> tuple:
    """(ExportedProgram over the full token range, report lines) for a module whose export fixed
    the token count, with its inline recurrences and token shifts rewritten. export(module, kwargs,
    dynamic_shapes) exports in capture's configuration. NotRecurrence (naming the site) otherwise."""
    from . import messages
    from .linear_attn_by_hand import resized
    t1, t2 = LENGTHS
    gm1, report, paths = _rewritten(export(module, resized(kwargs, dynamic_shapes, t1), None), t1)
    gm2, _, _ = _rewritten(export(module, resized(kwargs, dynamic_shapes, t2), None), t2)
    lifted = _Lift(gm1, gm2, t1, t2, dynamic_shapes).run(gm2)
    if lifted:
        gm1.recompile()
        report.append(f"{lifted} sizes of the graph as functions of the token count (the same in both graphs)")
    _check_nothing_else_fixes_the_length(module, kwargs, dynamic_shapes, export, paths)
    try:
        ep = export(gm1, kwargs, dynamic_shapes)
    except Exception as e:  # noqa: BLE001 - torch's failure says what still fixes the length
        raise NotRecurrence(f"after rewriting, the graph still fixes the length: {messages.reason(str(e))}") from e
    return ep, report


@contextlib.contextmanager
def _loops_cut(modules: list):
    """Within: a `range(n)` over a symbolic count, called by code of the modules' source files while
    one of the modules runs, yields one step (the loop traced once, the count left symbolic)."""
    from torch.nn.modules import module as nn_module
    ids, depth, real = {id(m) for m in modules}, [0], range

    def cut(*args):
        if depth[0] and len(args) == 1 and isinstance(args[0], torch.SymInt):
            return real(1)
        return real(*args)

    def pre(m, args):
        depth[0] += id(m) in ids

    def post(m, args, out):
        depth[0] -= id(m) in ids
    spaces = list({id(g): g for g in (type(m).forward.__globals__ for m in modules)}.values())
    held = [g.get("range", real) for g in spaces]
    handles = [nn_module.register_module_forward_pre_hook(pre), nn_module.register_module_forward_hook(post)]
    for g in spaces:
        g["range"] = cut
    try:
        yield
    finally:
        for g, r in zip(spaces, held):
            if r is real:
                g.pop("range", None)
            else:
                g["range"] = r
        for h in handles:
            h.remove()


def _check_nothing_else_fixes_the_length(module, kwargs, dynamic_shapes, export, paths: set) -> None:
    """The two fixed lengths cannot see a branch on the length elsewhere (at 1 token, beyond a
    chunk): the model is traced once more over the full range with the sites' loops cut to one
    step, and must fix the length nowhere (NotRecurrence naming the module that does)."""
    from . import messages
    from .length_watch import watch_length
    sites = [module.get_submodule(p) for p in sorted(paths)]
    with _loops_cut(sites), watch_length(module) as watch:
        try:
            export(module, kwargs, dynamic_shapes)
        except Exception as e:  # noqa: BLE001 - torch's failure says what fixes the length
            where = f" in {watch.describe()}" if watch.describe() else ""
            raise NotRecurrence(f"with the loops of {', '.join(sorted(paths))} cut to one step, the forward still "
                                f"fixes the length{where}: {messages.reason(str(e))}") from e
