#include "passes/shard_plan.h"

#include <fmt/core.h>

#include <functional>
#include <optional>
#include <set>
#include <stdexcept>

#include "passes/shard_walk.h"

namespace fuselm::passes {
namespace {

using shard::HeadSection;
using shard::kAllGather;
using shard::kAllReduce;
using shard::kRmsNormSplit;
using shard::kVocabEmbedding;
using shard::Seed;
using shard::Walk;
using fusers::Shard;

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
    r.op = gw == gather.end() ? kAllReduce : kAllGather;
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
  // The schemas of the ops the plan put in the graph, from the op table.
  auto schema = [&](std::string_view op) {
    const auto& def = ir::op_def(op);
    g.op_args[std::string(op)] = std::vector<std::string>(def.args.begin(), def.args.end());
  };
  schema(kAllReduce);
  if (!gather.empty()) schema(kAllGather);
  for (const auto& n : g.nodes)
    if (n.op == kVocabEmbedding || n.op == kRmsNormSplit) schema(n.op);
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
  auto seeds = shard::collect_seeds(plan, size, out);
  shard::vocab_seeds(plan.graph, size, seeds, out);
  shard::moe_seeds(plan.graph, size, rank, seeds, out);
  shard::mla_seeds(plan.graph, size, seeds, out);
  shard::check_rows(plan.graph, seeds, size);
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
