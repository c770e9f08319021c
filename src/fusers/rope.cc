// Rotary embedding   y = x·cos + rotate(x)·sin   →  fuselm.rope(x, cos, sin, pairing)
//   anchor:   each own cat or stack of the module whose first piece is a negated slice; one site per
//             rotated tensor (q and k). The pairing is what the pieces compute:
//               half         cat([-x[..., h:], x[..., :h]], -1)  (transformers' rotate_half)
//               interleaved  stack([-x[..., 1::2], x[..., ::2]], -1) flattened back to x's shape
//                            (rotate_every_two: GPT-J, CodeGen, Cohere, GLM, Helium)
//   then:     rotate(x) times sin (either operand order), read nowhere else; x times cos (either
//             order); their sum with alpha 1. x is the same value in all three places.
//   x:        an f32 value whose last dim d = 2h is static: a head-split q or k, or the rotated slice of
//             a partial-rotary model (Phi, GPT-NeoX, StableLM: the pass-through part stays as the graph
//             has it)
//   cos, sin: f32 values whose last dim is d and which broadcast to x without growing it
//   rejected: pieces that are neither pairing (halves swapped, the other half negated), other
//             dtypes (bf16 or f16 round every product; unfused keeps torch's rounding), a sum that grows x
//   composes: the nodes it replaces belong to no other fuser's pattern, so it applies alongside the
//             module's rewriting fusion (qkv, packed_qkv, mla); the driver's overlap check still holds.
//   Saves ~9 small ops per rotated tensor per layer (slices, neg, cat, two muls, add), which at decode
//   run one after another on the calling thread between GEMVs.
#include <algorithm>
#include <climits>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

struct SliceArgs {
  int x = -1;
  int64_t dim = 0, start = 0, end = INT64_MAX, step = 1;
  std::string str() const {  // "4:", "0:4", "::2"
    const std::string e = end == INT64_MAX ? "" : std::to_string(end);
    return fmt::format("{}:{}{}", start ? std::to_string(start) : "", e, step == 1 ? "" : fmt::format(":{}", step));
  }
};

std::optional<int64_t> int_arg(const ir::Node& n, size_t i, int64_t dflt) {
  if (n.args.size() <= i || n.args[i].is_none()) return dflt;
  if (n.args[i].kind != ir::Arg::Kind::integer) return std::nullopt;
  return n.args[i].i;
}

// aten.slice.Tensor(x, dim, start, end, step) owned by sg, with literal arguments; dim normalized.
std::optional<SliceArgs> as_slice(const Subgraph& sg, int i) {
  if (i < 0 || !sg.owns(i)) return std::nullopt;
  const ir::Node& n = sg.node(i);
  if (n.op != ops::slice) return std::nullopt;
  SliceArgs s;
  s.x = ref_arg(n, 0);
  const auto dim = int_arg(n, 1, 0), start = int_arg(n, 2, 0), end = int_arg(n, 3, INT64_MAX), step = int_arg(n, 4, 1);
  if (s.x < 0 || !dim || !start || !end || !step) return std::nullopt;
  const int64_t nd = static_cast<int64_t>(sg.node(s.x).out.shape.size());
  s.dim = *dim < 0 ? *dim + nd : *dim;
  s.start = *start, s.end = *end, s.step = *step;
  return s;
}

bool same_dim(const ir::Dim& a, const ir::Dim& b) { return a.symbolic() ? a.expr == b.expr : !b.symbolic() && a.value == b.value; }

bool same_shape(const ir::TensorMeta& a, const ir::TensorMeta& b) {
  return a.shape.size() == b.shape.size() &&
         std::equal(a.shape.begin(), a.shape.end(), b.shape.begin(), [](const auto& p, const auto& q) { return same_dim(p, q); });
}

// t broadcasts to x (right-aligned) without growing it, and its last dim is x's.
bool broadcasts_to(const ir::TensorMeta& t, const ir::TensorMeta& x) {
  if (t.shape.empty() || t.shape.size() > x.shape.size()) return false;
  const size_t off = x.shape.size() - t.shape.size();
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const ir::Dim& td = t.shape[d];
    const bool one = !td.symbolic() && td.value == 1;
    if (d + 1 == t.shape.size() ? !same_dim(td, x.shape[off + d]) : !(one || same_dim(td, x.shape[off + d])))
      return false;
  }
  return true;
}

// The other operand of a binary node owned by sg that reads `v`, or -1.
int other_operand(const ir::Node& n, int v) {
  const int a = ref_arg(n, 0), b = ref_arg(n, 1);
  if (a == v && b >= 0) return b;
  if (b == v && a >= 0) return a;
  return -1;
}

// The node's single user when it is owned by sg and has op `op`, else -1.
int only_user(const Subgraph& sg, int v, std::string_view op) {
  const auto& us = sg.users_of(v);
  if (us.size() != 1 || !sg.owns(us[0]) || sg.node(us[0]).op != op) return -1;
  return us[0];
}

struct Site {
  int x = -1, cos = -1, sin = -1, add = -1;
  int64_t width = 0;
  std::string pairing;
};

// A candidate anchor: a cat (rotate_half) or stack (interleaved pairs) of two pieces, the first a
// negated slice.
bool looks_rotation(const Subgraph& sg, int n) {
  const ir::Node& c = sg.node(n);
  if (c.args.empty() || c.args[0].kind != ir::Arg::Kind::list || c.args[0].list.size() != 2) return false;
  const auto& first = c.args[0].list[0];
  if (first.kind != ir::Arg::Kind::ref || !sg.owns(first.ref) || sg.node(first.ref).op != ops::neg) return false;
  return as_slice(sg, ref_arg(sg.node(first.ref), 0)).has_value();
}

// The rotation an anchor computes: x, the pairing, and the value that holds rotate(x) in x's shape
// (the cat itself; the flatten or view of the stack).
struct Rotation {
  int x = -1, rotated = -1;
  std::string pairing;
  int64_t width = 0;
};

std::optional<Rotation> rotation(const Subgraph& sg, int anchor, Why& why) {
  const ir::Graph& g = *sg.graph;
  const ir::Node& c = sg.node(anchor);
  const bool stack = c.op == ops::stack;
  const auto& pieces = c.args[0].list;
  const auto neg = as_slice(sg, ref_arg(sg.node(pieces[0].ref), 0));
  const auto pos = pieces[1].kind == ir::Arg::Kind::ref ? as_slice(sg, pieces[1].ref) : std::nullopt;
  if (!pos || pos->x != neg->x) return why.reject("{}(-slice, ...) whose second piece is not a slice of the same value", stack ? "stack" : "cat");
  Rotation r{neg->x, anchor, stack ? "interleaved" : "half", 0};
  const ir::TensorMeta& xm = g.nodes[r.x].out;
  const int64_t nd = static_cast<int64_t>(xm.shape.size());
  const auto d = static_dim(xm, -1);
  if (!d || *d % 2 != 0) return why.reject("the rotated width is not static and even");
  r.width = *d;
  const int64_t h = *d / 2;
  const auto dim = int_arg(c, 1, 0);
  const int64_t want_dim = stack ? nd : nd - 1;  // a stack adds the pair dim last
  if (!dim || (*dim != -1 && *dim != want_dim)) return why.reject("the {} is not over the last dim", stack ? "stack" : "cat");
  const bool on_last = neg->dim == nd - 1 && pos->dim == nd - 1;
  const bool ok = stack ? on_last && neg->start == 1 && pos->start == 0 && neg->step == 2 && pos->step == 2 &&
                              neg->end >= *d && pos->end >= *d
                        : on_last && neg->start == h && neg->end >= *d && neg->step == 1 && pos->start == 0 &&
                              pos->end == h && pos->step == 1;
  if (!ok)
    return why.reject("{}(-x[..., {}], x[..., {}]) over dim {} is not {} of width {}", stack ? "stack" : "cat", neg->str(),
                      pos->str(), neg->dim == pos->dim ? std::to_string(neg->dim) : fmt::format("{}/{}", neg->dim, pos->dim),
                      stack ? "rotate_every_two" : "rotate_half", *d);
  if (stack) {  // [..., d/2, 2] back to [..., d]: flatten(-2, -1) or a view of x's shape
    const auto& us = sg.users_of(anchor);
    const ir::Node* f = us.size() == 1 && sg.owns(us[0]) ? &g.nodes[us[0]] : nullptr;
    const bool flat = f && (f->op == ops::flatten || f->op == ops::view ||
                            f->op == ops::reshape);
    if (!flat || !same_shape(f->out, xm)) return why.reject("the stacked pairs are not flattened back to the rotated shape");
    r.rotated = us[0];
  }
  return r;
}

std::optional<Site> rope_site(const Subgraph& sg, int anchor, Why& why) {
  const ir::Graph& g = *sg.graph;
  const auto r = rotation(sg, anchor, why);
  if (!r) return std::nullopt;
  Site s;
  s.x = r->x;
  s.width = r->width;
  s.pairing = r->pairing;
  const ir::TensorMeta& xm = g.nodes[s.x].out;
  // rotate(x) · sin, the sum, x · cos.
  const int mul_sin = only_user(sg, r->rotated, ops::mul);
  if (mul_sin < 0) return why.reject("rotate(x) is read by something else than one product");
  s.sin = other_operand(g.nodes[mul_sin], r->rotated);
  const int add = only_user(sg, mul_sin, ops::add);
  if (s.sin < 0 || add < 0) return why.reject("rotate(x) · sin is not added once");
  if (number_arg(g.nodes[add], 2).value_or(1.0) != 1.0) return why.reject("the sum has alpha != 1");
  const int mul_cos = other_operand(g.nodes[add], mul_sin);
  if (mul_cos < 0 || !sg.owns(mul_cos) || g.nodes[mul_cos].op != ops::mul)
    return why.reject("rotate(x) · sin is not added to a product");
  s.cos = other_operand(g.nodes[mul_cos], s.x);
  if (s.cos < 0) return why.reject("rotate(x) · sin is added to a product that does not read x");
  s.add = add;
  for (int v : {s.x, s.cos, s.sin, anchor, r->rotated, mul_sin, mul_cos, add})
    if (g.nodes[v].out.dtype != DType::f32)
      return why.reject("{} is {}: the fused rope runs f32 only", g.nodes[v].op, dtype_name(g.nodes[v].out.dtype));
  if (!broadcasts_to(g.nodes[s.cos].out, xm) || !broadcasts_to(g.nodes[s.sin].out, xm))
    return why.reject("cos or sin does not broadcast to the rotated value with its last dim");
  if (!same_shape(g.nodes[add].out, xm)) return why.reject("the sum is not of the rotated value's shape");
  return s;
}

class RopeFuser final : public Fuser {
 public:
  std::string_view name() const override { return "rope"; }
  bool composes() const override { return true; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    std::vector<int> cats;
    for (std::string_view op : {ops::cat, ops::stack})
      for (int c : sg.own_of(op))
        if (looks_rotation(sg, c)) cats.push_back(c);
    if (cats.empty()) return why.not_applicable();
    std::vector<Site> sites;
    for (int c : cats) {
      auto s = rope_site(sg, c, why);
      if (!s) return std::nullopt;
      sites.push_back(*s);
    }
    // New nodes in graph order: each goes right before the sum it replaces.
    std::sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) { return a.add < b.add; });
    Fusion f;
    for (const Site& s : sites) {
      NewNode nn = op_node("fuselm.rope.default",
                           {{"input", ref(s.x)}, {"cos", ref(s.cos)}, {"sin", ref(s.sin)}, {"pairing", string(s.pairing)}});
      nn.out = sg.node(s.add).out;
      nn.place_before = s.add;
      f.replaces.push_back({s.add, new_ref(static_cast<int>(f.nodes.size()))});
      f.nodes.push_back(std::move(nn));
    }
    // One line for inspect: "pairing=half sites=2 width=64", or each site's when they differ.
    const bool uniform = std::all_of(sites.begin(), sites.end(), [&](const Site& s) {
      return s.pairing == sites.front().pairing && s.width == sites.front().width;
    });
    if (uniform) {
      f.detail = fmt::format("pairing={} sites={} width={}", sites.front().pairing, sites.size(), sites.front().width);
    } else {
      for (const Site& s : sites) f.detail += fmt::format("{}{}x{}", f.detail.empty() ? "sites=" : ",", s.pairing, s.width);
    }
    return f;
  }
};

}  // namespace

const Fuser& rope_fuser() {
  static const RopeFuser f;
  return f;
}

// Registry order 80: composes: x·cos + rotate_half(x)·sin beside the module's qkv fusion.
[[maybe_unused]] const bool kRegistered = register_fuser(rope_fuser(), 80);

}  // namespace fuselm::fusers
