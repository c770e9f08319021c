// The walk's rules for the ops with their own split semantics (shard_walk.h): vocab-parallel
// lookups, experts, attention and MLA by heads, the fused pointwise ops and RMSNorm.
#include "passes/shard_walk.h"

namespace fuselm::passes::shard {

// A lookup in a table split by vocabulary rows: this rank's rows [first, first + local) give their
// embeddings, every other id a zero row, and the all-reduce after it sums the one rank that has it.
std::optional<Failure> Walk::embedding(ir::Node& node) {
  const Sh& w = in(node.args[0]);
  if (!w.split() || !seeds_[w.origin].vocab || w.dim != 0 || in(node.args[1]).split())
    return fail(node, w.split() ? w.origin : in(node.args[1]).origin, "looks up a table not split by vocabulary rows");
  node.op = kVocabEmbedding;
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
  const bool shared = has_arg(def, "shared_up");  // fuselm.experts_shared: the shared expert too
  if (shared)
    for (const char* a : {"shared_gate", "shared_up", "shared_down"}) names.push_back(a);
  bool whole = false;
  for (const char* a : names) {
    const auto& arg = node.args[def.arg(a)];
    if (arg.is_none()) continue;
    const Sh& x = in(arg);
    if (x.split() && seeds_[x.origin].fixed) origin = x.origin;
    else whole = true;
  }
  if (shared)
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
  node.op = kRmsNormSplit;
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

// fuselm.act_and_mul: a [gate_r | up_r] input (two equal sections) gives an up_r-wide output.
std::optional<Failure> Walk::act_and_mul(ir::Node& node, int origin) {
  const Sh& x = in(node.args[0]);
  const int last = static_cast<int>(g_.nodes[node.args[0].ref].out.shape.size()) - 1;
  if (x.dim != last || x.secs.size() != 2 || !(x.secs[0] == x.secs[1]))
    return fail(node, origin, "reads a [gate | up] input not split as [gate_r | up_r]");
  sh_[node.index] = Sh{x.dim, {x.secs[0]}, x.origin};
  return std::nullopt;
}

// fuselm.rope: pointwise, but it pairs elements across the last (rotated) dim.
std::optional<Failure> Walk::rope(ir::Node& node, int origin) {
  const Sh& x = in(node.args[0]);
  if (x.split() && x.dim == static_cast<int>(node.out.shape.size()) - 1)
    return fail(node, origin, "rotates a dim split across ranks");
  return pointwise(node);
}

// fuselm.rms_norm: rows of a split value normalize locally unless the normalized (last) dim is split.
std::optional<Failure> Walk::rms_norm(ir::Node& node, int origin) {
  const Sh& x = in(node.args[0]);
  if (in(node.args[1]).split()) return fail(node, origin, "has a split weight");
  if (x.dim == static_cast<int>(node.out.shape.size()) - 1) return norm_over_split(node, x);
  sh_[node.index] = x;
  return std::nullopt;
}

}  // namespace fuselm::passes::shard
