#include "passes/shard_plan.h"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>

#include "ir/op_defs.h"

namespace fuselm::passes {
namespace {

using fusers::HeadSection;
using fusers::Shard;

// A block along the split dim: global and local width.
struct Sec {
  int64_t g = 0, l = 0;
  bool operator==(const Sec&) const = default;
};

// How a value is split across ranks: along `dim` in blocks `secs` (none: every rank holds all of it).
struct Sh {
  int dim = -1;
  std::vector<Sec> secs;
  int origin = -1;  // the seed it came from
  bool split() const { return dim >= 0; }
  int64_t global() const {
    int64_t s = 0;
    for (const auto& x : secs) s += x.g;
    return s;
  }
  int64_t local() const {
    int64_t s = 0;
    for (const auto& x : secs) s += x.l;
    return s;
  }
};

// A seed: a weight the fusions annotated, with the sections it is split by.
struct Seed {
  std::string target;
  Shard kind = Shard::none;
  int axis = 0;
  std::vector<HeadSection> sections;  // column: one per block (stacked: one per source)
  bool stacked = false;
  int sources = 0;
  bool vocab = false;  // an embedding table / LM head split by vocabulary rows (one section)
  std::optional<Slice> fixed;  // a weight of an experts op: this rank's slice, fixed up front
  std::string line;            // ... inspect's line for it
  int64_t local = 0;           // ... and its local size along `axis`
};

// A failure of the walk: the seed to replicate and why.
struct Failure {
  int origin = -1;
  std::string why;
};

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

bool is_pointwise(const std::string& op) {
  static const std::set<std::string, std::less<>> k = {
      "aten.mul.Tensor", "aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor", "aten.mul.Scalar",
      "aten.add.Scalar", "aten.sub.Scalar", "aten.div.Scalar", "aten.neg.default", "aten.rsqrt.default",
      "aten.pow.Tensor_Scalar", "aten.silu.default", "aten.gelu.default", "aten.tanh.default",
      "aten.sigmoid.default", "aten.relu.default", "aten.exp.default", "aten.erf.default", "aten.sin.default",
      "aten.cos.default", "aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout", "aten.to.device",
      "aten.contiguous.default", "aten.clone.default", "aten.alias.default", "aten.detach.default",
      "aten.dropout.default", "aten.type_as.default", "aten.sqrt.default", "aten.abs.default"};
  return k.contains(op);
}

bool is_reduction(const std::string& op) {
  return op == "aten.mean.dim" || op == "aten.sum.dim_IntList" || op == "aten.amax.default";
}

class Walk {
 public:
  Walk(ir::Graph& g, const std::vector<Seed>& seeds, const std::set<int>& off, int64_t n, int64_t rank)
      : g_(g), seeds_(seeds), off_(off), n_(n), rank_(rank), sh_(g.nodes.size()), tuple_(g.nodes.size()) {}

  std::optional<Failure> run() {
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

  // Literal edits, meta edits, all-reduce sites and zeroed biases of a walk that succeeded.
  std::vector<std::pair<ir::Arg*, int64_t>> edits;
  std::vector<int> reduce_after;
  std::map<int, int64_t> gather_after;  // vocab-parallel LM head -> its local width
  std::map<int, std::pair<int64_t, int64_t>> norm_weights;
  int split_norms = 0;  // fuselm.rms_norm_split ops (one all-reduce each)  // weight of a norm over a split width -> (first, local)
  std::set<std::string> zero_bias;
  std::set<int> used;  // seeds some op read
  const std::vector<Sh>& values() const { return sh_; }
  const std::vector<std::vector<Sh>>& tuples() const { return tuple_; }

 private:
  void seed_value(const ir::Node& node, int s) {
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

  Failure fail(const ir::Node& node, int origin, const std::string& why) const {
    const std::string mod = node.module_stack.empty() ? "<root>" : g_.modules[node.module_stack.back()].path;
    return Failure{origin, fmt::format("{} (node '{}' in {}) {}", node.op, node.name, mod, why)};
  }

  const Sh& in(const ir::Arg& a) const {
    static const Sh none;
    return a.kind == ir::Arg::Kind::ref ? sh_[a.ref] : none;
  }

  std::optional<Failure> step(ir::Node& node);
  std::optional<Failure> linear(ir::Node& node, int x, int w, int b, bool kn);
  std::optional<Failure> view(ir::Node& node);
  std::optional<Failure> embedding(ir::Node& node);
  std::optional<Failure> experts(ir::Node& node);
  std::optional<Failure> mla(ir::Node& node);
  std::optional<Failure> norm_over_split(ir::Node& node, const Sh& x);
  std::optional<Failure> pointwise(ir::Node& node);
  std::optional<Failure> attention(ir::Node& node);
  std::optional<Failure> split_sizes(ir::Node& node);
  std::optional<Failure> dims_op(ir::Node& node, const Sh& x);

  ir::Graph& g_;
  const std::vector<Seed>& seeds_;
  const std::set<int>& off_;
  int64_t n_, rank_;
  std::vector<Sh> sh_;
  std::vector<std::vector<Sh>> tuple_;
  std::map<int, bool> row_;  // seed placeholder -> row parallel
};

std::optional<Failure> Walk::step(ir::Node& node) {
  // Which inputs are split; an op with none is replicated as it is.
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
  if (origin < 0) return std::nullopt;
  const auto& op = node.op;
  if (op == "aten.linear.default") return linear(node, node.args[0].ref, node.args[1].ref,
                                                  node.args.size() > 2 && !node.args[2].is_none() ? node.args[2].ref : -1, false);
  if (op == "aten.addmm.default")
    return linear(node, node.args[1].ref, node.args[2].ref, node.args[0].is_none() ? -1 : node.args[0].ref, true);
  if (op == "aten.embedding.default") return embedding(node);
  if (op == "fuselm.experts.default" || op == "fuselm.experts_shared.default") return experts(node);
  if (op == "fuselm.mla_attention.default") return mla(node);
  for (const auto& a : node.args)
    if (a.kind == ir::Arg::Kind::ref && row_.contains(a.ref) && sh_[a.ref].split())
      return fail(node, origin, "reads a split weight other than as a projection's");
  if (op == "aten.view.default" || op == "aten.reshape.default" || op == "aten._unsafe_view.default") return view(node);
  if (is_pointwise(op)) return pointwise(node);
  if (op == "fuselm.attention.default") return attention(node);
  if (op == "aten.split_with_sizes.default") return split_sizes(node);
  if (op == "getitem") {
    const int t = node.args[0].ref;
    const auto i = node.args[1].i;
    if (i < 0 || i >= static_cast<int64_t>(tuple_[t].size())) return fail(node, origin, "reads an unknown piece");
    sh_[node.index] = tuple_[t][i];
    return std::nullopt;
  }
  if (op == "aten.cat.default") {
    const auto& l = node.args[0].list;
    const Sh& x = in(l.at(0));
    const int d = wrap(node.args.size() > 1 ? node.args[1].i : 0, g_.nodes[l[0].ref].out.shape.size());
    for (const auto& a : l)
      if (in(a).dim != x.dim || in(a).secs != x.secs) return fail(node, origin, "concatenates values split differently");
    if (d == x.dim) return fail(node, origin, "concatenates along the split dim");
    sh_[node.index] = x;
    return std::nullopt;
  }
  if (op == "fuselm.act_and_mul.default") {
    const Sh& x = in(node.args[0]);
    const int last = static_cast<int>(g_.nodes[node.args[0].ref].out.shape.size()) - 1;
    if (x.dim != last || x.secs.size() != 2 || !(x.secs[0] == x.secs[1]))
      return fail(node, origin, "reads a [gate | up] input not split as [gate_r | up_r]");
    sh_[node.index] = Sh{x.dim, {x.secs[0]}, x.origin};
    return std::nullopt;
  }
  if (op == "fuselm.rope.default") {  // pointwise, but pairs elements across the last (rotated) dim
    const Sh& x = in(node.args[0]);
    if (x.split() && x.dim == static_cast<int>(node.out.shape.size()) - 1)
      return fail(node, origin, "rotates a dim split across ranks");
    return pointwise(node);
  }
  if (op == "fuselm.rms_norm.default") {
    const Sh& x = in(node.args[0]);
    if (in(node.args[1]).split()) return fail(node, origin, "has a split weight");
    if (x.dim == static_cast<int>(node.out.shape.size()) - 1) return norm_over_split(node, x);
    sh_[node.index] = x;
    return std::nullopt;
  }
  return dims_op(node, in(node.args.empty() ? ir::Arg{} : node.args[0]));
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

// A lookup in a table split by vocabulary rows: this rank's rows [first, first + local) give their
// embeddings, every other id a zero row, and the all-reduce after it sums the one rank that has it.
std::optional<Failure> Walk::embedding(ir::Node& node) {
  const Sh& w = in(node.args[0]);
  if (!w.split() || !seeds_[w.origin].vocab || w.dim != 0 || in(node.args[1]).split())
    return fail(node, w.split() ? w.origin : in(node.args[1]).origin, "looks up a table not split by vocabulary rows");
  node.op = "fuselm.vocab_embedding.default";
  node.args.resize(2);
  ir::Arg first;
  first.kind = ir::Arg::Kind::integer;
  first.i = rank_ * w.local();
  node.args.push_back(first);
  used.insert(w.origin);
  reduce_after.push_back(node.index);
  return std::nullopt;
}

// An experts op over weights split by each expert's intermediate size (moe_seeds): every rank runs
// every routed expert on its columns, so the combined output is a partial sum, all-reduced once.
// All of its intermediate-sized weights must be split, its inputs and router not.
std::optional<Failure> Walk::experts(ir::Node& node) {
  const auto& def = ir::op_def(node.op);
  int origin = -1;
  for (const char* a : {"hidden", "top_k_index", "top_k_weights"})
    if (in(node.args[def.arg(a)]).split()) return fail(node, in(node.args[def.arg(a)]).origin, "reads a split input");
  std::vector<const char*> names = {"gate_up", "down", "gate_up_bias", "down_bias"};
  if (node.op == "fuselm.experts_shared.default")
    for (const char* a : {"shared_gate", "shared_up", "shared_down"}) names.push_back(a);
  bool whole = false;
  for (const char* a : names) {
    const auto& arg = node.args[def.arg(a)];
    if (arg.is_none()) continue;
    const Sh& x = in(arg);
    if (x.split() && seeds_[x.origin].fixed) origin = x.origin;
    else whole = true;
  }
  if (node.op == "fuselm.experts_shared.default")
    if (const auto& sc = node.args[def.arg("shared_scale")]; !sc.is_none() && in(sc).split())
      return fail(node, in(sc).origin, "has a split shared-expert gate");
  if (whole) return fail(node, origin, "has some of its expert weights whole (all or none are split)");
  for (const char* a : names)
    if (!node.args[def.arg(a)].is_none()) used.insert(in(node.args[def.arg(a)]).origin);
  reduce_after.push_back(node.index);
  return std::nullopt;
}

// MLA over this rank's heads (mla_seeds): q [1, H, T, Dn+Dr] split by heads, the up-projection
// w_up [H(Dn+Dv), R] by the same heads, the latent and rope key (the cache rows) whole. The output
// [1, T, H, Dv] is split by heads.
std::optional<Failure> Walk::mla(ir::Node& node) {
  const auto& def = ir::op_def(node.op);
  const Sh& q = in(node.args[def.arg("q")]);
  const Sh& w = in(node.args[def.arg("w_up")]);
  const int origin = q.split() ? q.origin : w.origin;
  for (const char* a : {"latent", "k_rot"})
    if (in(node.args[def.arg(a)]).split()) return fail(node, in(node.args[def.arg(a)]).origin, "has its latent path split");
  if (!q.split() || q.dim != 1 || q.secs.size() != 1) return fail(node, origin, "has its query heads not split by heads");
  if (!w.split() || w.dim != 0 || w.secs.size() != 1 || w.secs[0].l * q.secs[0].g != w.secs[0].g * q.secs[0].l)
    return fail(node, origin, "has its up-projection not split by the query's heads");
  used.insert(q.origin);
  used.insert(w.origin);
  sh_[node.index] = Sh{2, {q.secs[0]}, q.origin};
  return std::nullopt;
}

// An RMSNorm over a width split evenly across ranks (OLMoE's full-width q/k norm): each rank sums
// the squares of its columns, an all-reduce of one value per row gives the full sum, and the mean
// is over the global width (fuselm.rms_norm_split). Its weight is then sliced as the input: it
// must be a [width] parameter this norm alone reads. A width with replicated heads is refused.
std::optional<Failure> Walk::norm_over_split(ir::Node& node, const Sh& x) {
  if (x.secs.size() != 1) return fail(node, x.origin, "normalizes over a width made of several split blocks");
  const int64_t g = x.secs[0].g, l = x.secs[0].l;
  if (l * n_ != g) return fail(node, x.origin, "normalizes over a width whose heads are replicated across ranks");
  const auto& w = node.args[1];
  int weight = -1;
  if (!w.is_none()) {
    weight = w.kind == ir::Arg::Kind::ref ? w.ref : -1;
    const auto* p = weight >= 0 ? &g_.nodes[weight] : nullptr;
    if (!p || p->op != "placeholder" || p->placeholder_kind != "parameter" || p->out.shape.size() != 1 ||
        p->out.shape[0].value != g)
      return fail(node, x.origin, "normalizes over a split width with a weight that is not a [width] parameter");
    int users = 0;
    for (const auto& other : g_.nodes)
      for (const auto& a : other.args) users += a.kind == ir::Arg::Kind::ref && a.ref == weight;
    if (users != 1) return fail(node, x.origin, "normalizes over a split width with a weight other ops read too");
  }
  node.op = "fuselm.rms_norm_split.default";
  node.args.resize(4);
  ir::Arg width;
  width.kind = ir::Arg::Kind::integer;
  width.i = g;
  node.args.push_back(width);
  if (weight >= 0) norm_weights[weight] = {rank_ * l, l};
  ++split_norms;
  used.insert(x.origin);
  sh_[node.index] = x;
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

std::optional<Failure> Walk::attention(ir::Node& node) {
  const auto& def = ir::op_def(node.op);
  const Sh& q = in(node.args[def.arg("q")]);
  const Sh& k = in(node.args[def.arg("k")]);
  const Sh& v = in(node.args[def.arg("v")]);
  const int origin = q.split() ? q.origin : k.split() ? k.origin : v.origin;
  if (q.dim != 1 || q.secs.size() != 1) return fail(node, origin, "has its query heads not split by heads");
  for (const Sh* s : {&k, &v})
    if (s->split() && (s->dim != 1 || s->secs.size() != 1)) return fail(node, origin, "has k/v not split by heads");
  if (in(node.args[def.arg("sinks")]).split() || !node.args[def.arg("sinks")].is_none())
    return fail(node, origin, "has attention sinks (per-head values the plan does not split yet)");
  const int64_t hq = q.secs[0].l;
  // ALiBi slopes are per query head: this rank keeps the slopes of its heads [rank·hq, rank·hq + hq)
  // (the walk runs on a copy of the graph, so the list is cut once per successful walk).
  if (const size_t at = def.arg("alibi_slopes"); at < node.args.size() && !node.args[at].is_none()) {
    auto& slopes = node.args[at].list;
    if (node.args[at].kind != ir::Arg::Kind::list || static_cast<int64_t>(slopes.size()) != q.secs[0].g)
      return fail(node, origin, fmt::format("has {} ALiBi slopes for {} query heads", slopes.size(), q.secs[0].g));
    slopes = std::vector<ir::Arg>(slopes.begin() + rank_ * hq, slopes.begin() + (rank_ + 1) * hq);
  }
  const auto& kmeta = g_.nodes[node.args[def.arg("k")].ref].out.shape;
  const int64_t hk = k.split() ? k.secs[0].l : kmeta.at(1).value;
  if (hk <= 0 || hq % hk != 0) return fail(node, origin, fmt::format("would hold {} query heads over {} kv heads", hq, hk));
  sh_[node.index] = Sh{2, {q.secs[0]}, q.origin};
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
std::optional<Failure> Walk::dims_op(ir::Node& node, const Sh& x) {
  const auto& op = node.op;
  const int o = x.origin;
  if (!x.split()) return fail(node, o, "reads a split value in an argument the plan does not follow");
  const size_t in_rank = g_.nodes[node.args[0].ref].out.shape.size();
  Sh out = x;
  if (op == "aten.transpose.int") {
    const int a = wrap(node.args[1].i, in_rank), b = wrap(node.args[2].i, in_rank);
    out.dim = x.dim == a ? b : x.dim == b ? a : x.dim;
  } else if (op == "aten.permute.default") {
    const auto& l = node.args[1].list;
    for (size_t i = 0; i < l.size(); ++i)
      if (wrap(l[i].i, in_rank) == x.dim) out.dim = static_cast<int>(i);
  } else if (op == "aten.unsqueeze.default") {
    if (wrap(node.args[1].i, in_rank + 1) <= x.dim) ++out.dim;
  } else if (op == "aten.slice.Tensor" || op == "aten.select.int" || op == "aten.squeeze.dim") {
    const int d = wrap(node.args[1].i, in_rank);
    if (d == x.dim) return fail(node, o, "slices the split dim");
    if (op != "aten.slice.Tensor" && d < x.dim) --out.dim;
  } else if (op == "aten.expand.default") {
    out.dim = x.dim + static_cast<int>(node.out.shape.size() - in_rank);
    auto& lit = node.args[1].list.at(out.dim);
    if (lit.kind == ir::Arg::Kind::integer && lit.i == x.global()) edits.push_back({&lit, x.local()});
    else if (!(lit.kind == ir::Arg::Kind::integer && lit.i == -1)) return fail(node, o, "expands the split dim");
  } else if (is_reduction(op)) {
    const auto& l = node.args[1].list;
    const bool keep = node.args.size() > 2 && node.args[2].kind == ir::Arg::Kind::boolean && node.args[2].b;
    int below = 0;
    for (const auto& a : l) {
      const int d = wrap(a.i, in_rank);
      if (d == x.dim) return fail(node, o, "reduces over the split dim (its result would be per rank)");
      below += d < x.dim;
    }
    if (!keep) out.dim -= below;
  } else if (op == "aten.sym_size.int") {
    if (wrap(node.args[1].i, in_rank) == x.dim) return fail(node, o, "reads the size of the split dim");
    return std::nullopt;  // a replicated scalar
  } else {
    return fail(node, o, "reads a value split across ranks, and the plan does not know this op");
  }
  sh_[node.index] = out;
  return std::nullopt;
}

}  // namespace

namespace {

// The seeds of the fusion plan; notes without per-rank sizes are replicated with the reason.
std::vector<Seed> collect_seeds(const fusers::Plan& plan, int64_t n, ShardPlan& out) {
  std::vector<Seed> seeds;
  auto check = [&](const std::string& target, const std::vector<HeadSection>& secs) {
    for (const auto& h : secs)
      if (!h.per_rank(n))
        throw std::runtime_error(fmt::format("tensor parallel size {}: {} ({}) has {} {} x {} = {} columns, which do "
                                             "not divide among {} ranks",
                                             n, target, h.role, h.heads, h.head_dim == 1 ? "columns" : "heads",
                                             h.head_dim, h.size(), n));
  };
  for (const auto& w : plan.weights) {
    if (w.shard != Shard::column) continue;
    if (w.sections.empty() || w.sections.size() != w.sources.size()) {
      out.replicated.push_back(fmt::format("{}: its fusion gives no per-rank sections", w.target));
      continue;
    }
    check(w.target, w.sections);
    seeds.push_back(Seed{w.target, Shard::column, w.axis, w.sections, true, static_cast<int>(w.sources.size())});
  }
  for (const auto& s : plan.shards) {
    if (s.shard == Shard::column && s.sections.empty()) {
      out.replicated.push_back(fmt::format("{}: its fusion gives no per-rank sections", s.target));
      continue;
    }
    if (s.shard == Shard::column) check(s.target, s.sections);
    seeds.push_back(Seed{s.target, s.shard, s.axis, s.sections, false, 1});
  }
  return seeds;
}

// A 2-d parameter with static sizes the node reads in argument `a`, or -1.
int param_at(const ir::Graph& g, const ir::Arg& a) {
  if (a.kind != ir::Arg::Kind::ref) return -1;
  const auto& p = g.nodes[a.ref];
  if (p.op != "placeholder" || p.placeholder_kind != "parameter" || p.out.shape.size() != 2) return -1;
  for (const auto& d : p.out.shape)
    if (d.symbolic()) return -1;
  return a.ref;
}

// Vocab-parallel seeds: every table aten.embedding looks up, and the weight of the product behind
// the first output through pointwise ops of one tensor (the LM head, soft-capped or scaled). Both
// split by rows (the vocabulary), so a tied table is one seed; rows that do not divide among the
// ranks stay replicated, with why.
void vocab_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out) {
  std::set<int> tables;
  for (const auto& node : g.nodes)
    if (node.op == "aten.embedding.default" && !node.args.empty())
      if (int p = param_at(g, node.args[0]); p >= 0) tables.insert(p);
  for (int cur = g.outputs.empty() ? -1 : g.outputs.front(); cur >= 0;) {
    const auto& node = g.nodes[cur];
    if (node.op == "aten.linear.default" && node.args.size() > 1) {
      if (int p = param_at(g, node.args[1]); p >= 0) tables.insert(p);
      break;
    }
    if (!is_pointwise(node.op)) break;
    int next = -1, refs = 0;
    for (const auto& a : node.args)
      if (a.kind == ir::Arg::Kind::ref) next = a.ref, ++refs;
    cur = refs == 1 ? next : -1;
  }
  for (int p : tables) {
    const auto& node = g.nodes[p];
    if (std::any_of(seeds.begin(), seeds.end(), [&](const Seed& s) { return s.target == node.target; })) continue;
    const int64_t v = node.out.shape[0].value;
    if (v % n != 0) {
      out.replicated.push_back(fmt::format("{}: its {} vocabulary rows do not divide among {} ranks", node.target, v, n));
      continue;
    }
    Seed sd{node.target, Shard::column, 0, {HeadSection{"vocab", v, 1, false}}, false, 1};
    sd.vocab = true;
    seeds.push_back(sd);
  }
}

// A literal boolean argument of node n (false when absent or not a literal).
bool flag(const ir::Node& n, const ir::OpDef& def, const char* name) {
  const auto& a = n.args.at(def.arg(name));
  return a.kind == ir::Arg::Kind::boolean ? a.b : a.kind == ir::Arg::Kind::integer && a.i != 0;
}

// The static shape of the parameter node n reads in argument `name`, or empty.
std::vector<int64_t> param_shape(const ir::Graph& g, const ir::Node& n, const ir::OpDef& def, const char* name) {
  const auto& a = n.args.at(def.arg(name));
  if (a.kind != ir::Arg::Kind::ref) return {};
  const auto& p = g.nodes[a.ref];
  if (p.op != "placeholder" || p.placeholder_kind != "parameter") return {};
  std::vector<int64_t> s;
  for (const auto& d : p.out.shape) {
    if (d.symbolic()) return {};
    s.push_back(d.value);
  }
  return s;
}

// MoE seeds: each experts op's weights split by every expert's intermediate size I (docs/moe.md
// has the layouts): gate_up's [gate; up] halves (or interleaved pairs, or up alone) column
// parallel, down row parallel, the gate_up bias as gate_up, the down bias on rank 0 only; the
// shared expert's gate/up by rows and its down by columns. The router stays replicated. An op
// whose I (or shared I) does not divide among the ranks keeps its experts whole, with why.
void moe_seeds(const ir::Graph& g, int64_t n, int64_t rank, std::vector<Seed>& seeds, ShardPlan& out) {
  for (const auto& node : g.nodes) {
    if (node.op != "fuselm.experts.default" && node.op != "fuselm.experts_shared.default") continue;
    const auto& def = ir::op_def(node.op);
    const bool tr = flag(node, def, "is_transposed"), cat = flag(node, def, "is_concatenated"),
               gate = flag(node, def, "has_gate");
    const auto gu = param_shape(g, node, def, "gate_up"), dn = param_shape(g, node, def, "down");
    const std::string where = g.nodes[node.args[def.arg("gate_up")].ref].target;
    if (gu.size() != 3 || dn.size() != 3) {
      out.replicated.push_back(fmt::format("{}: its experts' weights are not [E, ., .] parameters", where));
      continue;
    }
    const int gu_axis = tr ? 2 : 1, dn_axis = tr ? 1 : 2;
    const int64_t I = dn[dn_axis], l = I / n;
    std::vector<std::pair<const char*, Seed>> group;
    auto add = [&](const char* name, int axis, std::vector<std::pair<int64_t, int64_t>> pieces, bool zero,
                   const std::string& line) {
      const auto& a = node.args.at(def.arg(name));
      if (a.kind != ir::Arg::Kind::ref) return;
      const auto shape = param_shape(g, node, def, name);
      int64_t local = 0;
      for (const auto& pc : pieces) local += pc.second;
      if (zero) local = shape.at(axis), pieces = {{0, local}};
      Seed sd{g.nodes[a.ref].target, Shard::column, axis, {HeadSection{"experts", shape.at(axis), 1, false}}, false, 1};
      sd.sections[0].heads = shape.at(axis);
      sd.fixed = Slice{axis, std::move(pieces), zero && rank != 0};
      sd.line = fmt::format("{}: {}", sd.target, line);
      sd.local = local;
      group.push_back({name, std::move(sd)});
    };
    const int64_t r0 = rank * l;
    std::vector<std::pair<int64_t, int64_t>> up_pieces =
        !gate ? std::vector<std::pair<int64_t, int64_t>>{{r0, l}}
        : cat ? std::vector<std::pair<int64_t, int64_t>>{{r0, l}, {I + r0, l}}
              : std::vector<std::pair<int64_t, int64_t>>{{2 * r0, 2 * l}};
    const std::string per = fmt::format("{} of each expert's {} intermediate columns per rank", l, I);
    add("gate_up", gu_axis, up_pieces, false, fmt::format("experts' gate/up, column parallel (dim {}): {}", gu_axis, per));
    add("down", dn_axis, {{r0, l}}, false, fmt::format("experts' down, row parallel (dim {}): {}, then all-reduce", dn_axis, per));
    add("gate_up_bias", 1, up_pieces, false, "experts' gate/up bias, split as gate/up");
    add("down_bias", 1, {}, true, "experts' down bias, added on rank 0 only");
    int64_t Is = 0, ls = 0;
    if (node.op == "fuselm.experts_shared.default") {
      const auto su = param_shape(g, node, def, "shared_up");
      Is = su.empty() ? 0 : su[0];
      ls = Is / n;
      const std::string sper = fmt::format("{} of the shared expert's {} intermediate columns per rank", ls, Is);
      add("shared_gate", 0, {{rank * ls, ls}}, false, "shared expert's gate, column parallel (dim 0): " + sper);
      add("shared_up", 0, {{rank * ls, ls}}, false, "shared expert's up, column parallel (dim 0): " + sper);
      add("shared_down", 1, {{rank * ls, ls}}, false, "shared expert's down, row parallel (dim 1): " + sper);
    }
    if (I % n != 0 || Is % n != 0) {
      out.replicated.push_back(fmt::format("{}: its experts' intermediate size {} (shared: {}) does not divide among {} "
                                           "ranks", where, I, Is, n));
      continue;
    }
    for (auto& [name, sd] : group) seeds.push_back(std::move(sd));
  }
}

// The one linear with a parameter weight and `width` output columns found walking back from node
// `from` (stopping at every linear), or -1 when there is none or more than one.
int linear_behind(const ir::Graph& g, int from, int64_t width) {
  std::vector<int> todo{from};
  std::set<int> seen, found;
  while (!todo.empty()) {
    const int c = todo.back();
    todo.pop_back();
    if (!seen.insert(c).second) continue;
    const auto& m = g.nodes[c];
    if (m.op == "aten.linear.default") {
      const int p = m.args.size() > 1 ? param_at(g, m.args[1]) : -1;
      if (p >= 0 && g.nodes[p].out.shape[0].value == width) found.insert(p);
      continue;
    }
    std::function<void(const ir::Arg&)> visit = [&](const ir::Arg& a) {
      if (a.kind == ir::Arg::Kind::ref) todo.push_back(a.ref);
      for (const auto& x : a.list) visit(x);
    };
    for (const auto& a : m.args) visit(a);
  }
  return found.size() == 1 ? *found.begin() : -1;
}

// The weight of the first linear with `width` input columns reached forward from node `from`, or -1.
int linear_after(const ir::Graph& g, int from, int64_t width) {
  std::set<int> reach{from};
  for (const auto& m : g.nodes) {
    if (m.index <= from) continue;
    bool reads = false;
    for (const auto& a : m.args) reads |= a.kind == ir::Arg::Kind::ref && reach.contains(a.ref);
    if (!reads) continue;
    if (m.op == "aten.linear.default") {
      const int p = m.args.size() > 1 ? param_at(g, m.args[1]) : -1;
      return p >= 0 && g.nodes[p].out.shape[1].value == width ? p : -1;
    }
    reach.insert(m.index);
  }
  return -1;
}

// MLA seeds (docs/mla.md): each fuselm.mla_attention's H heads. Its q projection (the linear behind
// q with H·(Dn+Dr) outputs) and its up-projection w_up column parallel by heads, the first linear
// after it (H·Dv inputs: the output projection) row parallel. The latent path (the q and kv
// down-projections, their norms, the rope key) and the latent cache stay whole on every rank.
void mla_seeds(const ir::Graph& g, int64_t n, std::vector<Seed>& seeds, ShardPlan& out) {
  auto seeded = [&](const std::string& t) {
    return std::any_of(seeds.begin(), seeds.end(), [&](const Seed& s) { return s.target == t; });
  };
  for (const auto& node : g.nodes) {
    if (node.op != "fuselm.mla_attention.default") continue;
    const auto& def = ir::op_def(node.op);
    const auto& qa = node.args.at(def.arg("q"));
    const int wu = param_at(g, node.args.at(def.arg("w_up")));
    static const std::vector<ir::Dim> none;
    const auto& qm = qa.kind == ir::Arg::Kind::ref ? g.nodes[qa.ref].out.shape : none;
    const std::string where = wu >= 0 ? g.nodes[wu].target : node.name;
    if (wu < 0 || qm.size() != 4 || qm[1].symbolic() || qm[3].symbolic()) {
      out.replicated.push_back(fmt::format("{}: MLA whose query or up-projection is not a [1, H, T, D] value and a "
                                           "parameter",
                                           where));
      continue;
    }
    const int64_t H = qm[1].value, Dq = qm[3].value, Dn = node.args.at(def.arg("nope_dim")).i,
                  Dv = node.args.at(def.arg("v_dim")).i;
    const int qp = linear_behind(g, qa.ref, H * Dq), op = linear_after(g, node.index, H * Dv);
    if (H % n != 0 || qp < 0 || op < 0) {
      out.replicated.push_back(H % n != 0 ? fmt::format("{}: MLA's {} heads do not divide among {} ranks", where, H, n)
                                          : fmt::format("{}: MLA without one query projection ({} outputs) before it "
                                                        "and one output projection ({} inputs) after it",
                                                        where, H * Dq, H * Dv));
      continue;
    }
    if (seeded(g.nodes[qp].target) || seeded(g.nodes[wu].target) || seeded(g.nodes[op].target)) continue;
    seeds.push_back(Seed{g.nodes[qp].target, Shard::column, 0, {HeadSection{"q", H, Dq, false}}, false, 1});
    seeds.push_back(Seed{g.nodes[wu].target, Shard::column, 0, {HeadSection{"kv_up", H, Dn + Dv, false}}, false, 1});
    seeds.push_back(Seed{g.nodes[op].target, Shard::row, 1, {}, false, 1});
  }
}

// Row seeds must divide their input width; checked on the graph's parameter shapes.
void check_rows(const ir::Graph& g, const std::vector<Seed>& seeds, int64_t n) {
  for (const auto& node : g.nodes) {
    if (node.op != "placeholder") continue;
    for (const auto& s : seeds)
      if (s.target == node.target && s.kind == Shard::row) {
        const int64_t k = node.out.shape.at(s.axis).value;
        if (k % n != 0)
          throw std::runtime_error(fmt::format("tensor parallel size {}: {} (row parallel) has {} input columns, which "
                                               "do not divide among {} ranks",
                                               n, s.target, k, n));
      }
  }
}

// fuselm.all_reduce after each node of `after` and fuselm.all_gather (of the last dim, whose local
// width the map gives) after each of `gather`; their readers (and the outputs) read the result.
void insert_collectives(ir::Graph& g, const std::vector<int>& after, const std::map<int, int64_t>& gather) {
  std::set<int> at(after.begin(), after.end());
  for (const auto& [i, w] : gather) at.insert(i);
  std::vector<int> map(g.nodes.size()), reduced(g.nodes.size(), -1);
  std::vector<ir::Node> nodes;
  for (auto& node : g.nodes) {
    map[node.index] = static_cast<int>(nodes.size());
    nodes.push_back(node);
    if (!at.contains(node.index)) continue;
    const auto gw = gather.find(node.index);
    ir::Node r;
    r.op = gw == gather.end() ? "fuselm.all_reduce.default" : "fuselm.all_gather.default";
    r.name = node.name + (gw == gather.end() ? "_all_reduce" : "_all_gather");
    r.out_kind = ir::Node::Out::tensor;
    r.out = node.out;
    if (gw != gather.end()) nodes.back().out.shape.back().value = gw->second;
    r.module_stack = node.module_stack;
    ir::Arg a;
    a.kind = ir::Arg::Kind::ref;
    a.ref = node.index;  // renumbered below with the rest, but never redirected
    r.args = {a};
    r.index = -2;
    reduced[node.index] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(r));
  }
  std::function<void(ir::Arg&, bool)> fix = [&](ir::Arg& a, bool own) {
    if (a.kind == ir::Arg::Kind::ref) a.ref = (!own && reduced[a.ref] >= 0) ? reduced[a.ref] : map[a.ref];
    for (auto& x : a.list) fix(x, own);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const bool own = nodes[i].index == -2;
    for (auto& a : nodes[i].args) fix(a, own);
    nodes[i].index = static_cast<int>(i);
  }
  for (auto& o : g.outputs) o = reduced[o] >= 0 ? reduced[o] : map[o];
  g.nodes = std::move(nodes);
  g.index_by_name.clear();
  for (const auto& n : g.nodes) g.index_by_name[n.name] = n.index;
  g.op_args["fuselm.all_reduce.default"] = {"input"};
  if (!gather.empty()) g.op_args["fuselm.all_gather.default"] = {"input"};
  for (const auto& n : g.nodes)
    if (n.op == "fuselm.vocab_embedding.default") g.op_args[n.op] = {"weight", "indices", "first"};
    else if (n.op == "fuselm.rms_norm_split.default") g.op_args[n.op] = {"input", "weight", "eps", "weight_offset", "width"};
}

// The metas of split values hold this rank's sizes (the KV layers are read from them).
void local_metas(ir::Graph& g, const Walk& w) {
  for (auto& node : g.nodes) {
    const auto& s = w.values()[node.index];
    if (s.split() && s.dim < static_cast<int>(node.out.shape.size())) node.out.shape[s.dim].value = s.local();
    const auto& t = w.tuples()[node.index];
    for (size_t i = 0; i < t.size() && i < node.outs.size(); ++i)
      if (t[i].split() && t[i].dim < static_cast<int>(node.outs[i].shape.size()))
        node.outs[i].shape[t[i].dim].value = t[i].local();
  }
}

// This rank's pieces of one column block set: each section's heads [rank*H/n, +per_rank).
std::vector<std::pair<int64_t, int64_t>> column_pieces(const std::vector<HeadSection>& secs, int64_t n, int64_t rank,
                                                       bool offsets) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const auto& h : secs) {
    const int64_t local = *h.per_rank(n);
    const int64_t first = rank * h.heads / n;
    out.push_back({(offsets ? at : 0) + first * h.head_dim, local});
    at += h.size();
  }
  return out;
}

void record_slices(const fusers::Plan& plan, const std::vector<Seed>& seeds, const std::set<int>& active,
                   const Walk& w, ShardPlan& out) {
  const int64_t n = out.size, rank = out.rank;
  for (int s : active) {
    const Seed& sd = seeds[s];
    if (sd.kind == Shard::row) {
      int64_t k = 0;
      for (const auto& node : plan.graph.nodes)
        if (node.op == "placeholder" && node.target == sd.target) k = node.out.shape.at(sd.axis).value * n;
      out.params[sd.target] = Slice{sd.axis, {{rank * (k / n), k / n}}, false};
      out.sharded.push_back(fmt::format("{}: row parallel (input dim {}: {} of {} per rank), then all-reduce",
                                        sd.target, sd.axis, k / n, k));
      continue;
    }
    if (sd.fixed) {
      out.params[sd.target] = *sd.fixed;
      out.sharded.push_back(sd.line);
      continue;
    }
    if (sd.vocab) {
      const auto& h = sd.sections.at(0);
      out.params[sd.target] = Slice{0, column_pieces(sd.sections, n, rank, true), false};
      out.sharded.push_back(fmt::format("{}: vocab parallel (dim 0: {} of {} rows per rank)", sd.target,
                                        *h.per_rank(n), h.size()));
      continue;
    }
    std::string secs;
    for (const auto& h : sd.sections)
      secs += fmt::format("{}{}:{}x{}->{}", secs.empty() ? "" : " ", h.role, h.heads, h.head_dim, *h.per_rank(n));
    out.sharded.push_back(fmt::format("{}: column parallel (dim {}) {}", sd.target, sd.axis, secs));
    if (!sd.stacked) {
      out.params[sd.target] = Slice{sd.axis, column_pieces(sd.sections, n, rank, true), false};
      continue;
    }
    for (const auto& tr : plan.weights)
      if (tr.target == sd.target) {
        std::vector<Slice> per;
        for (size_t i = 0; i < tr.sources.size(); ++i)
          per.push_back(Slice{tr.axis, column_pieces({sd.sections[i]}, n, rank, false), false});
        out.stacked[tr.target] = per;
        auto shape = tr.shape;
        int64_t local = 0;
        for (const auto& h : sd.sections) local += *h.per_rank(n);
        if (!shape.empty()) shape[tr.axis] = local;
        out.stacked_shape[tr.target] = shape;
      }
  }
  for (const auto& [p, fl] : w.norm_weights) {
    const auto& node = plan.graph.nodes[p];
    out.params[node.target] = Slice{0, {fl}, false};
    out.sharded.push_back(fmt::format("{}: weight of an RMSNorm over a split width ({} of {} per rank; its sum of "
                                      "squares is all-reduced)",
                                      node.target, fl.second, fl.second * n));
  }
  for (const auto& b : w.zero_bias) {
    for (const auto& node : plan.graph.nodes)
      if (node.op == "placeholder" && node.target == b)
        out.params[b] = Slice{0, {{0, node.out.shape.at(0).value}}, rank != 0};
    out.sharded.push_back(fmt::format("{}: bias of a row-parallel projection, added on rank 0 only", b));
  }
}

}  // namespace

ShardPlan shard_plan(fusers::Plan& plan, int64_t size, int64_t rank) {
  ShardPlan out;
  out.size = size;
  out.rank = rank;
  if (size == 1) return out;
  auto seeds = collect_seeds(plan, size, out);
  vocab_seeds(plan.graph, size, seeds, out);
  moe_seeds(plan.graph, size, rank, seeds, out);
  mla_seeds(plan.graph, size, seeds, out);
  check_rows(plan.graph, seeds, size);
  std::set<int> off;
  std::map<int, std::string> why;
  ir::Graph g;
  std::optional<Walk> ok;
  for (size_t tries = 0; tries <= seeds.size(); ++tries) {
    g = plan.graph;
    Walk w(g, seeds, off, size, rank);
    auto f = w.run();
    if (!f) {
      ok.emplace(std::move(w));
      break;
    }
    if (f->origin < 0 || off.contains(f->origin)) throw std::logic_error("shard plan: a failure without a seed");
    off.insert(f->origin);
    why[f->origin] = f->why;
  }
  if (!ok) throw std::logic_error("shard plan: the walk did not settle");
  for (auto& [arg, v] : ok->edits) arg->i = v;
  std::set<int> active;
  for (size_t s = 0; s < seeds.size(); ++s)
    if (!off.contains(static_cast<int>(s))) active.insert(static_cast<int>(s));
  for (const auto& [s, text] : why) out.replicated.push_back(fmt::format("{}: {}", seeds[s].target, text));
  // Seed placeholders (and the weights of norms over a split width) hold this rank's slices.
  local_metas(g, *ok);
  for (const auto& [p, fl] : ok->norm_weights) g.nodes[p].out.shape[0].value = fl.second;
  plan.graph = std::move(g);
  record_slices(plan, seeds, active, *ok, out);
  insert_collectives(plan.graph, ok->reduce_after, ok->gather_after);
  out.all_reduces = static_cast<int>(ok->reduce_after.size()) + ok->split_norms;
  out.all_gathers = static_cast<int>(ok->gather_after.size());
  std::vector<std::string> errors;
  plan.kv = fusers::kv_layers(plan.graph, errors);
  if (!errors.empty()) throw std::runtime_error(errors.front());
  return out;
}

std::string format_shard_plan(const ShardPlan& p) {
  std::string s = fmt::format("tensor parallel: {} ranks, {} weights sharded, {} replicated by the plan's notes, {} "
                              "all-reduces and {} all-gathers per forward; everything else (norms, routers) is "
                              "replicated\n",
                              p.size, p.sharded.size(), p.replicated.size(), p.all_reduces, p.all_gathers);
  for (const auto& l : p.sharded) s += "  sharded     " + l + "\n";
  for (const auto& l : p.replicated) s += "  replicated  " + l + "\n";
  return s;
}

}  // namespace fuselm::passes
