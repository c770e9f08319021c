// The walk over the graph (shard_walk.h): the dispatch on each op's tensor-parallel rule and the
// rules that move, reshape or combine split values.
#include <algorithm>

#include "passes/shard_walk.h"

namespace fuselm::passes::shard {
namespace {

using R = ir::TpRule;

// The product of dims [0, n) as (static part, sorted symbols): comparable across views.
std::pair<int64_t, std::vector<std::string>> prefix(const std::vector<ir::Dim>& s, int n) {
  std::pair<int64_t, std::vector<std::string>> p{1, {}};
  for (int i = 0; i < n; ++i)
    if (s[i].symbolic()) p.second.push_back(s[i].expr);
    else p.first *= s[i].value;
  std::sort(p.second.begin(), p.second.end());
  return p;
}

int wrap(int64_t d, size_t rank) { return static_cast<int>(d < 0 ? d + static_cast<int64_t>(rank) : d); }

}  // namespace

bool has_arg(const ir::OpDef& def, std::string_view name) {
  return std::find(def.args.begin(), def.args.end(), name) != def.args.end();
}

std::optional<Failure> Walk::run() {
  std::map<std::string, int> seed_of;
  for (size_t s = 0; s < seeds_.size(); ++s)
    if (!off_.contains(static_cast<int>(s))) seed_of[seeds_[s].target] = static_cast<int>(s);
  for (auto& node : g_.nodes) {
    if (node.op == "placeholder") {
      auto it = seed_of.find(node.target);
      if (it != seed_of.end()) seed_value(node, it->second);
      continue;
    }
    if (auto f = step(node)) return f;
  }
  for (int o : g_.outputs)
    if (sh_[o].split()) return Failure{sh_[o].origin, "a graph output would stay split across ranks"};
  return std::nullopt;
}

void Walk::seed_value(const ir::Node& node, int s) {
  const Seed& sd = seeds_[s];
  Sh v;
  v.origin = s;
  v.dim = sd.axis;
  if (sd.fixed) {
    v.secs = {{node.out.shape.at(sd.axis).value, sd.local}};
  } else if (sd.kind == Shard::row) {
    const int64_t k = node.out.shape.at(sd.axis).value;
    v.secs = {{k, k / n_}};
  } else {
    for (const auto& h : sd.sections) v.secs.push_back({h.size(), *h.per_rank(n_)});
  }
  row_[node.index] = sd.kind == Shard::row;
  sh_[node.index] = v;
}

Failure Walk::fail(const ir::Node& node, int origin, const std::string& why) const {
  const std::string mod = node.module_stack.empty() ? "<root>" : g_.modules[node.module_stack.back()].path;
  return Failure{origin, fmt::format("{} (node '{}' in {}) {}", node.op, node.name, mod, why)};
}

// The seed of a split input of the node (the last one read), or -1 when every input is whole.
int Walk::split_origin(const ir::Node& node) const {
  int origin = -1;
  auto note = [&](const ir::Arg& a) {
    if (in(a).split()) origin = in(a).origin;
    if (a.kind == ir::Arg::Kind::ref)
      for (const auto& t : tuple_[a.ref])
        if (t.split()) origin = t.origin;
  };
  for (const auto& a : node.args) {
    note(a);
    for (const auto& x : a.list) note(x);
  }
  return origin;
}

// An op with no split input is replicated as it is; the ops that read weights come first (a split
// weight may be read only by them), then the ops that move values.
std::optional<Failure> Walk::step(ir::Node& node) {
  const int origin = split_origin(node);
  if (origin < 0) return std::nullopt;
  const ir::TpRule rule = ir::op_traits(node.op).tp;
  switch (rule) {
    case R::linear: case R::addmm: case R::embedding: case R::experts: case R::mla_attention:
      return weight_op(node, rule);
    default:
      break;
  }
  for (const auto& a : node.args)
    if (a.kind == ir::Arg::Kind::ref && row_.contains(a.ref) && sh_[a.ref].split())
      return fail(node, origin, "reads a split weight other than as a projection's");
  return value_op(node, rule, origin);
}

std::optional<Failure> Walk::weight_op(ir::Node& node, ir::TpRule rule) {
  const auto& a = node.args;
  switch (rule) {
    case R::linear:  // linear(x, W[N, K], b?)
      return linear(node, a[0].ref, a[1].ref, a.size() > 2 && !a[2].is_none() ? a[2].ref : -1, false);
    case R::addmm:  // addmm(b?, x, W[K, N])
      return linear(node, a[1].ref, a[2].ref, a[0].is_none() ? -1 : a[0].ref, true);
    case R::embedding:
      return embedding(node);
    case R::experts:
      return experts(node);
    default:
      return mla(node);
  }
}

std::optional<Failure> Walk::value_op(ir::Node& node, ir::TpRule rule, int origin) {
  switch (rule) {
    case R::reshape: return view(node);
    case R::pointwise: return pointwise(node);
    case R::attention: return attention(node);
    case R::split_with_sizes: return split_sizes(node);
    case R::getitem: return getitem(node, origin);
    case R::cat: return cat(node, origin);
    case R::act_and_mul: return act_and_mul(node, origin);
    case R::rope: return rope(node, origin);
    case R::rms_norm: return rms_norm(node, origin);
    default: return dims_op(node, rule, in(node.args.empty() ? ir::Arg{} : node.args[0]));
  }
}

std::optional<Failure> Walk::getitem(ir::Node& node, int origin) {
  const int t = node.args[0].ref;
  const auto i = node.args[1].i;
  if (i < 0 || i >= static_cast<int64_t>(tuple_[t].size())) return fail(node, origin, "reads an unknown piece");
  sh_[node.index] = tuple_[t][i];
  return std::nullopt;
}

std::optional<Failure> Walk::cat(ir::Node& node, int origin) {
  const auto& l = node.args[0].list;
  const Sh& x = in(l.at(0));
  const int d = wrap(node.args.size() > 1 ? node.args[1].i : 0, g_.nodes[l[0].ref].out.shape.size());
  for (const auto& a : l)
    if (in(a).dim != x.dim || in(a).secs != x.secs) return fail(node, origin, "concatenates values split differently");
  if (d == x.dim) return fail(node, origin, "concatenates along the split dim");
  sh_[node.index] = x;
  return std::nullopt;
}

std::optional<Failure> Walk::linear(ir::Node& node, int x, int w, int b, bool kn) {
  const Sh& xs = sh_[x];
  const Sh& ws = sh_[w];
  const int origin = xs.split() ? xs.origin : ws.split() ? ws.origin : sh_[b].origin;
  const int out_axis = kn ? 1 : 0, in_axis = kn ? 0 : 1;
  const bool w_row = ws.split() && row_.contains(w) && row_[w];
  if (ws.split() && !w_row && ws.dim == out_axis && !xs.split()) {
    if (b >= 0 && !(sh_[b].split() && sh_[b].secs == ws.secs)) return fail(node, origin, "has a bias not split as its weight");
    used.insert(ws.origin);
    if (b >= 0) used.insert(sh_[b].origin);
    if (seeds_[ws.origin].vocab) {  // the LM head: local logits, all-gathered along the vocabulary
      gather_after[node.index] = ws.local();
      return std::nullopt;
    }
    sh_[node.index] = Sh{static_cast<int>(node.out.shape.size()) - 1, ws.secs, ws.origin};
    return std::nullopt;
  }
  if (w_row && ws.dim == in_axis && xs.split() && xs.dim == static_cast<int>(g_.nodes[x].out.shape.size()) - 1) {
    if (xs.local() != ws.secs[0].l || xs.global() != ws.secs[0].g)
      return fail(node, ws.origin, fmt::format("reads {} of {} columns per rank; its row-parallel weight expects {}",
                                               xs.local(), xs.global(), ws.secs[0].l));
    if (b >= 0 && sh_[b].split()) return fail(node, origin, "has a split bias");
    if (b >= 0) zero_bias.insert(g_.nodes[b].target);
    used.insert(ws.origin);
    used.insert(xs.origin);
    reduce_after.push_back(node.index);
    return std::nullopt;  // replicated after the all-reduce
  }
  if (w_row && !xs.split()) return fail(node, ws.origin, "is row parallel but its input is not split (its producer is replicated)");
  return fail(node, origin, "is a projection whose input and weight are not split as column or row parallel");
}

std::optional<Failure> Walk::view(ir::Node& node) {
  const Sh& x = in(node.args[0]);
  const auto& is = g_.nodes[node.args[0].ref].out.shape;
  const auto& os = node.out.shape;
  if (x.secs.size() != 1) return fail(node, x.origin, "reshapes a dim made of several split blocks");
  const int64_t G = x.secs[0].g, L = x.secs[0].l;
  const auto p = prefix(is, x.dim);
  int e = -1;
  for (int k = 0; k <= static_cast<int>(os.size()); ++k)
    if (prefix(os, k) == p) {
      e = k;
      break;
    }
  if (e < 0 || e >= static_cast<int>(os.size()) || os[e].symbolic()) return fail(node, x.origin, "moves the split dim");
  const int64_t oe = os[e].value;
  int64_t local = 0;
  if (oe == G) local = L;
  else if (oe > 0 && G % oe == 0 && (L * oe) % G == 0) local = L * oe / G;  // [w] -> [heads, head_dim]
  else if (G > 0 && oe % G == 0) local = L * (oe / G);                       // [heads, head_dim] -> [w]
  else return fail(node, x.origin, fmt::format("reshapes a split width {} into {}", G, oe));
  // The local inner size must be whole (heads x head_dim: the heads split, never a head).
  if (local <= 0) return fail(node, x.origin, "would leave a rank no columns");
  auto& list = node.args.at(1).list;
  if (node.args.at(1).kind != ir::Arg::Kind::list || e >= static_cast<int>(list.size()))
    return fail(node, x.origin, "has a shape argument that is not a list of sizes");
  auto& lit = list[e];
  if (lit.kind == ir::Arg::Kind::integer && lit.i != -1) edits.push_back({&lit, local});
  else if (!(lit.kind == ir::Arg::Kind::integer && lit.i == -1))
    return fail(node, x.origin, "gives the split dim's size as a symbol");
  sh_[node.index] = Sh{e, {{oe, local}}, x.origin};
  return std::nullopt;
}
std::optional<Failure> Walk::pointwise(ir::Node& node) {
  const size_t rank = node.out.shape.size();
  Sh out;
  for (const auto& a : node.args) {
    if (a.kind != ir::Arg::Kind::ref) continue;
    const auto& meta = g_.nodes[a.ref].out.shape;
    const Sh& s = sh_[a.ref];
    if (!s.split()) continue;
    Sh aligned = s;
    aligned.dim = s.dim + static_cast<int>(rank - meta.size());
    if (out.split() && (out.dim != aligned.dim || out.secs != aligned.secs))
      return fail(node, s.origin, "combines values split in different ways");
    out = aligned;
  }
  for (const auto& a : node.args) {
    if (a.kind != ir::Arg::Kind::ref || sh_[a.ref].split() || g_.nodes[a.ref].out_kind != ir::Node::Out::tensor) continue;
    const auto& meta = g_.nodes[a.ref].out.shape;
    const int d = out.dim - static_cast<int>(rank - meta.size());
    if (d >= 0 && !(meta[d].value == 1 && !meta[d].symbolic()))
      return fail(node, out.origin, "combines a split value with a replicated one of full width on the split dim");
  }
  sh_[node.index] = out;
  return std::nullopt;
}

std::optional<Failure> Walk::split_sizes(ir::Node& node) {
  const Sh& x = in(node.args[0]);
  const int d = wrap(node.args.size() > 2 ? node.args[2].i : 0, g_.nodes[node.args[0].ref].out.shape.size());
  auto& sizes = node.args[1].list;
  std::vector<Sh> items(sizes.size(), x);
  if (d == x.dim) {
    if (sizes.size() != x.secs.size()) return fail(node, x.origin, "splits the split dim other than by its sections");
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i].kind != ir::Arg::Kind::integer || sizes[i].i != x.secs[i].g)
        return fail(node, x.origin, "splits the split dim other than by its sections");
      edits.push_back({&sizes[i], x.secs[i].l});
      // A block every rank holds whole (MQA's one KV head) is replicated from here on.
      items[i] = x.secs[i].l == x.secs[i].g ? Sh{} : Sh{x.dim, {x.secs[i]}, x.origin};
    }
  }
  tuple_[node.index] = items;
  return std::nullopt;
}
// Ops that move or drop dims but never touch the split one.
std::optional<Failure> Walk::dims_op(ir::Node& node, ir::TpRule rule, const Sh& x) {
  const int o = x.origin;
  if (!x.split()) return fail(node, o, "reads a split value in an argument the plan does not follow");
  const size_t in_rank = g_.nodes[node.args[0].ref].out.shape.size();
  Sh out = x;
  if (rule == R::transpose) {
    const int a = wrap(node.args[1].i, in_rank), b = wrap(node.args[2].i, in_rank);
    out.dim = x.dim == a ? b : x.dim == b ? a : x.dim;
  } else if (rule == R::permute) {
    const auto& l = node.args[1].list;
    for (size_t i = 0; i < l.size(); ++i)
      if (wrap(l[i].i, in_rank) == x.dim) out.dim = static_cast<int>(i);
  } else if (rule == R::unsqueeze) {
    if (wrap(node.args[1].i, in_rank + 1) <= x.dim) ++out.dim;
  } else if (rule == R::slice || rule == R::drop_dim) {
    const int d = wrap(node.args[1].i, in_rank);
    if (d == x.dim) return fail(node, o, "slices the split dim");
    if (rule == R::drop_dim && d < x.dim) --out.dim;
  } else if (rule == R::expand) {
    out.dim = x.dim + static_cast<int>(node.out.shape.size() - in_rank);
    auto& lit = node.args[1].list.at(out.dim);
    if (lit.kind == ir::Arg::Kind::integer && lit.i == x.global()) edits.push_back({&lit, x.local()});
    else if (!(lit.kind == ir::Arg::Kind::integer && lit.i == -1)) return fail(node, o, "expands the split dim");
  } else if (rule == R::reduce) {
    const size_t axes = static_cast<size_t>(ir::op_traits(node.op).reduce_axes);
    const auto& l = node.args.at(axes).list;
    const bool keep = node.args.size() > axes + 1 && node.args[axes + 1].kind == ir::Arg::Kind::boolean &&
                      node.args[axes + 1].b;
    int below = 0;
    for (const auto& a : l) {
      const int d = wrap(a.i, in_rank);
      if (d == x.dim) return fail(node, o, "reduces over the split dim (its result would be per rank)");
      below += d < x.dim;
    }
    if (!keep) out.dim -= below;
  } else if (rule == R::sym_size) {
    if (wrap(node.args[1].i, in_rank) == x.dim) return fail(node, o, "reads the size of the split dim");
    return std::nullopt;  // a replicated scalar
  } else {
    return fail(node, o, "reads a value split across ranks, and the plan does not know this op");
  }
  sh_[node.index] = out;
  return std::nullopt;
}

}  // namespace fuselm::passes::shard
