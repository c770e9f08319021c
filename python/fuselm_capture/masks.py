"""Masks read per layer: capture's entry in transformers' AttentionMaskInterface.

transformers builds every attention mask through one interface (masking_utils: create_causal_mask,
create_sliding_window_causal_mask, create_chunked_causal_mask, create_bidirectional_mask, ...),
each handing a mask *function* f(batch, head, q_idx, kv_idx) -> bool to the registered mask
builder. fuselm's builder (mask_forward) builds no tensor: it probes the function on a small grid
of positions and returns a MaskKind, which the model passes on to its attention layers like any
mask, and attention_forward (ops.py) writes into that layer's fuselm::attention op. So a window
that lives only in the mask (a config's layer types, a module attribute the attention call never
passes) reaches the engine, and a mask the engine cannot run is named in the IR and refused there.

Kinds, over the absolute positions q (query) and k (key) of one sequence:
  causal         k <= q
  sliding (W)    k <= q and k > q - W     (the query and the W-1 keys before it)
  chunked (C)    k <= q and k // C == q // C
  bidirectional_prefix (P)  k <= q or k < P (a prefix-LM: the first P positions see each other)
  bidirectional  any other mask where some query sees a later key (full, windowed bidirectional)
  unknown        anything else, or a function that reads tensors computed from the inputs
The kind is read from the function's values alone (the window by a binary search for the first
visible key at a far position, then the whole form is checked on a dense grid, at the window's
edges and on random pairs), never from the function's name or the config.

Combinators are looked into: transformers' and_masks/or_masks hold their parts in a closure, and
two of its parts close over tensors computed from the inputs during export (fake tensors, without
values): the packed-sequence mask (derived from position_ids; capture passes one unpadded
sequence, and the engine keeps sequences apart itself) is dropped, and the chunked overlay's left
padding is zero (capture passes no attention_mask). Any other part reading such a tensor makes
the mask unknown, so the engine refuses it.
"""
from __future__ import annotations

import random
import types
from dataclasses import dataclass, field, replace

import torch

FAR = 1 << 40  # a query position past any window or chunk a model can have


class MaskReadAsTensor(AttributeError):
    """A model that computes with its attention mask as a tensor (not only hands it to attention).
    An AttributeError, so that hasattr() probes of the mask stay False as for any non-tensor."""


def _read_as_tensor(what: str):
    raise MaskReadAsTensor(f"the model reads its attention mask as a tensor ({what}): it computes with the "
                           "mask itself (slices, adds to or combines it), which fuselm's attention op, "
                           "taking a mask kind and not a mask tensor, cannot express")


@torch.library.custom_op("fuselm::mask_tensor", mutates_args=())
def mask_tensor(batch: int, q_length: int, kv_length: int, kind: str, device: torch.device) -> torch.Tensor:
    """The mask of `kind` as an additive float32 [batch, 1, q_length, kv_length] tensor (0 where a
    query sees a key, -inf where not: the form transformers' eager attention takes), for a model
    that indexes its mask. No engine runs it: capture proves every such tensor dead after export
    (a top-k key selection as wide as the context, key_selection.py; a mask that only hides keys
    from a per-key bias, key_bias.py) or refuses the model; only its shape is traced."""
    raise RuntimeError("fuselm::mask_tensor is never run: capture refuses a graph that keeps it")


@mask_tensor.register_fake
def _mask_tensor_fake(batch, q_length, kv_length, kind, device):
    return torch.empty(batch, 1, q_length, kv_length, dtype=torch.float32, device=device)


@torch.library.custom_op("fuselm::attention_tensor_mask", mutates_args=())
def attention_tensor_mask(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Ties an attention call's output to the mask tensor the model built and passed to it (the
    call's op carries mask "tensor"). Capture-only: key_bias.py proves the mask to be the call's
    mask kind plus a per-key bias and folds it into the op, or refuses the model."""
    raise RuntimeError("fuselm::attention_tensor_mask is never run: capture folds or refuses it")


@attention_tensor_mask.register_fake
def _attention_tensor_mask_fake(out, mask):
    return torch.empty_like(out)


@dataclass(frozen=True)
class MaskKind:
    """What one mask function computes. size: the window W (sliding) or chunk C (chunked), else -1.
    _shape: (batch, q_length, kv_length, device) of the mask transformers asked for, when the mask builder
    made it (the lengths are the export's symbolic token count); private, so that hasattr(mask,
    "shape") stays False as model code expects of a mask that is no tensor."""
    kind: str
    size: int = -1
    why: str = ""
    _shape: tuple | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """kind, its size when it has one, and the reason after a colon: `bidirectional_prefix 3`,
        `bidirectional: query 0 sees key 1` (the form the IR's mask argument takes)."""
        text = f"{self.kind} {self.size}" if self.size > 0 else self.kind
        return f"{text}: {self.why}" if self.why else text

    # Capture hands attention a MaskKind where transformers hands it a mask tensor; a model that
    # uses the tensor itself gets a named refusal instead of an AttributeError about MaskKind.
    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the tensor indexing the mask gives (mask_tensor: additive float32); a mask
        transformers did not build through capture's mask interface has no tensor form."""
        if self._shape is None:
            _read_as_tensor(".dtype")
        return torch.float32

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _read_as_tensor(f".{name}")

    # A comparison with a number or a tensor is the model computing with its mask (`mask == 0`):
    # refused by name rather than answered False as object equality would.
    def __eq__(self, other):
        if not isinstance(other, MaskKind):
            _read_as_tensor(f"== {other!r}"[:40])
        return (self.kind, self.size, self.why) == (other.kind, other.size, other.why)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.kind, self.size, self.why))

    def __getitem__(self, key):
        # DeepSeek Sparse Attention's indexer scores keys under the mask; the scores only select
        # keys, which key_selection.py proves to be every key (or refuses), so the tensor made here
        # is dead by then. A model that computes anything else with it keeps it alive and is refused.
        if self._shape is None:
            _read_as_tensor("indexed")
        batch, q_length, kv_length, device = self._shape
        return mask_tensor(batch, q_length, kv_length, self.describe(), device)[key]


class _Unprobeable(Exception):
    """A mask part whose values depend on tensors computed from the inputs."""


def _cells(fn) -> dict:
    if not getattr(fn, "__closure__", None):
        return {}
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))


def _library_codes() -> dict:
    """Code objects of transformers' mask combinators and input-derived parts, by role."""
    from transformers import masking_utils as mu
    codes = {"and": mu.and_masks(mu.causal_mask_function).__code__,
             "or": mu.or_masks(mu.causal_mask_function).__code__}
    zero = torch.zeros(1, dtype=torch.long)
    if hasattr(mu, "packed_sequence_mask_function"):
        codes["packed"] = mu.packed_sequence_mask_function(zero).__code__
    if hasattr(mu, "chunked_overlay"):
        codes["chunked"] = mu.chunked_overlay(1, zero).__code__
    if hasattr(mu, "add_offsets_to_mask_function"):
        codes["offsets"] = mu.add_offsets_to_mask_function(mu.causal_mask_function, 0, 0).__code__
    return codes


def _reads_fake(value) -> bool:
    from torch._subclasses.fake_tensor import is_fake
    return isinstance(value, torch.Tensor) and (is_fake(value) or value.device.type == "meta")


def _predicate(fn, codes):
    """A function (q, k) -> bool equal to the mask function at batch 0, head 0."""
    code = getattr(fn, "__code__", None)
    cells = _cells(fn)
    if code is not None and code in (codes["and"], codes["or"]):
        parts = [_predicate(f, codes) for f in cells["mask_functions"]]
        parts = [p for p in parts if p is not None]
        join = all if code is codes["and"] else any
        return lambda q, k: join(p(q, k) for p in parts)
    if code is not None and code is codes.get("packed"):
        return None  # one sequence at capture; the engine separates sequences itself
    if code is not None and code is codes.get("chunked") and _reads_fake(cells.get("left_padding")):
        # no attention_mask at capture: no left padding (rebuilt with a plain list of zeros)
        values = dict(cells, left_padding=[0])
        fn = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                                tuple(types.CellType(values[n]) for n in code.co_freevars))
        cells = values
    if code is not None and code is codes.get("offsets"):
        inner = _predicate(cells["mask_function"], codes)
        qo, ko = cells["q_offset"], cells["kv_offset"]
        if inner is None or not isinstance(qo, int) or not isinstance(ko, int):
            raise _Unprobeable("its position offsets are tensors")
        return lambda q, k: inner(q + qo, k + ko)
    if any(_reads_fake(v) for v in cells.values()):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise _Unprobeable(f"its part {name} reads tensors computed from the inputs")

    def call(q, k):
        r = fn(0, 0, q, k)
        return bool(r.item()) if isinstance(r, torch.Tensor) else bool(r)
    return call


def _expected(kind: str, size: int, q: int, k: int) -> bool:
    if kind == "bidirectional_prefix":
        return k <= q or k < size
    if k > q:
        return False
    if kind == "sliding":
        return k > q - size
    if kind == "chunked":
        return k // size == q // size
    return True


def _first_visible(p, q: int) -> int:
    """The first key a query at q sees, assuming its visible keys are one run ending at q."""
    if p(q, 0):
        return 0
    lo, hi = 0, q  # p(q, lo) false, p(q, hi) true
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p(q, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _candidate(p) -> MaskKind:
    for q in (0, 1, 5, 63, FAR):
        for d in (1, 2, 7, 1000):
            if p(q, q + d):
                return _bidirectional(p, f"query {q} sees key {q + d}")
    for q in (0, 1, 2, 31, FAR):
        if not p(q, q):
            return MaskKind("unknown", why=f"query {q} does not see itself")
    first = _first_visible(p, FAR)
    if first == 0:
        return MaskKind("causal")
    if _first_visible(p, FAR + 1) == first + 1:
        return MaskKind("sliding", FAR - first + 1)
    step = 1  # chunked: the next query whose first visible key moves starts the next chunk
    while _first_visible(p, FAR + step) == first:
        step *= 2
        if step > FAR:
            return MaskKind("unknown", why="its visible keys neither slide nor reset in chunks")
    lo, hi = FAR + step // 2, FAR + step  # first key unchanged at lo, moved at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _first_visible(p, mid) == first:
            lo = mid
        else:
            hi = mid
    return MaskKind("chunked", hi - first)


def _bidirectional(p, why: str) -> MaskKind:
    """A prefix-LM mask when query 0 sees exactly the keys 0 .. P-1 and the rest is causal."""
    if p(0, 0) and not p(0, FAR):
        lo, hi = 0, FAR  # query 0 sees key lo, not key hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if p(0, mid):
                lo = mid
            else:
                hi = mid
        m = MaskKind("bidirectional_prefix", hi)
        if _check(p, m) is None:
            return m
    return MaskKind("bidirectional", why=why)


def _check(p, m: MaskKind) -> str | None:
    """Where the predicate differs from the candidate form, or None."""
    s = m.size if m.size > 0 else 64
    points = [(q, k) for q in range(80) for k in range(80)]
    for base in (s - 1, s, s + 1, 2 * s - 1, 2 * s, 3 * s + 1, FAR, FAR + s - 1):
        for q in (base - 1, base, base + 1):
            for k in (q - s - 1, q - s, q - s + 1, q - s + 2, q - q % s - 1, q - q % s, q - 1, q, q + 1):
                points.append((q, k))
    rng = random.Random(0)
    points += [(rng.randrange(4 * s + 8), rng.randrange(4 * s + 8)) for _ in range(500)]
    for q, k in points:
        if q >= 0 and k >= 0 and p(q, k) != _expected(m.kind, m.size, q, k):
            return f"query {q} {'sees' if p(q, k) else 'does not see'} key {k}"
    return None


def classify(mask_function) -> MaskKind:
    """The kind of a transformers mask function (see the module doc); never raises for a function
    that runs on integer positions."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        try:
            p = _predicate(mask_function, _library_codes())
        except _Unprobeable as e:
            return MaskKind("unknown", why=str(e))
        if p is None:
            return MaskKind("causal")
        try:
            m = _candidate(p)
            if m.kind in ("causal", "sliding", "chunked"):
                bad = _check(p, m)
                if bad:
                    return MaskKind("unknown", why=f"not {m.describe()}: {bad}")
            return m
        except Exception as e:  # noqa: BLE001 - a function that does not run on positions
            first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
            return MaskKind("unknown", why=f"probing it failed: {type(e).__name__}: {first}")


def mask_forward(batch_size=1, q_length=None, kv_length=None, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, **kwargs) -> MaskKind:
    """AttentionMaskInterface entry (transformers' mask builder signature): the mask's kind, not a
    tensor. A 2-D attention_mask (padding) is not the engine's business: capture passes none."""
    if mask_function is None:
        from transformers.masking_utils import causal_mask_function
        mask_function = causal_mask_function
    kind = classify(mask_function)
    if q_length is None or kv_length is None:
        return kind
    device = torch.device(kwargs.get("device") or "meta")
    return replace(kind, _shape=(batch_size, q_length, kv_length, device))
