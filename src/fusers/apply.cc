// The driver: subgraphs per module, structure signatures and the match cache, per-instance
// validation, the rewrite (fused nodes in place of matched roots, dead nodes removed, refs
// renumbered) and the report.
#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

void for_each_ref(ir::Arg& a, const std::function<void(int&)>& f) {
  if (a.kind == ir::Arg::Kind::ref) f(a.ref);
  for (auto& x : a.list) for_each_ref(x, f);
}

void for_each_ref_const(const ir::Arg& a, const std::function<void(int)>& f) {
  if (a.kind == ir::Arg::Kind::ref) f(a.ref);
  for (const auto& x : a.list) for_each_ref_const(x, f);
}

std::vector<std::vector<int>> build_users(const ir::Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (const auto& n : g.nodes)
    for (const auto& a : n.args)
      for_each_ref_const(a, [&](int r) {
        if (users[r].empty() || users[r].back() != n.index) users[r].push_back(n.index);
      });
  return users;
}

std::vector<Subgraph> build_subgraphs(const ir::Graph& g, const std::vector<std::vector<int>>& users) {
  std::vector<Subgraph> sgs(g.modules.size());
  for (size_t m = 0; m < sgs.size(); ++m) {
    sgs[m].graph = &g;
    sgs[m].users = &users;
    sgs[m].module = static_cast<int>(m);
  }
  for (const auto& n : g.nodes) {
    if (n.op == "placeholder") continue;
    for (int m : n.module_stack) {
      if (m < 0 || m >= static_cast<int>(sgs.size())) continue;
      if (sgs[m].nodes.empty() || sgs[m].nodes.back() != n.index) sgs[m].nodes.push_back(n.index);
    }
    if (!n.module_stack.empty()) sgs[n.module_stack.back()].own.push_back(n.index);
  }
  std::set<int> outs(g.outputs.begin(), g.outputs.end());
  for (auto& sg : sgs) {
    std::set<int> seen;
    for (int i : sg.nodes) {
      for (const auto& a : g.nodes[i].args)
        for_each_ref_const(a, [&](int r) {
          if (!sg.contains(r) && seen.insert(r).second) sg.inputs.push_back(r);
        });
      bool out = outs.count(i) > 0;
      for (int u : users[i]) out = out || !sg.contains(u);
      if (out) sg.outputs.push_back(i);
    }
  }
  return sgs;
}

// The structure of a subgraph without names or shapes: ops, literal arguments, dataflow between
// its nodes (local positions) and the kinds of the values it reads.
std::string signature(const Subgraph& sg) {
  const ir::Graph& g = *sg.graph;
  std::string s;
  std::function<void(const ir::Arg&)> arg = [&](const ir::Arg& a) {
    using K = ir::Arg::Kind;
    switch (a.kind) {
      case K::none: s += "_"; break;
      case K::boolean: s += a.b ? "T" : "F"; break;
      case K::integer: s += std::to_string(a.i); break;
      case K::real: s += fmt::format("{:a}", a.f); break;
      case K::string: s += "'" + a.s + "'"; break;
      case K::sym: s += "$" + a.s; break;
      case K::dtype: s += "d" + std::string(ir::dtype_name(a.dtype)); break;
      case K::device: s += "@"; break;
      case K::ref: {
        auto it = std::lower_bound(sg.nodes.begin(), sg.nodes.end(), a.ref);
        if (it != sg.nodes.end() && *it == a.ref) {
          s += "n" + std::to_string(it - sg.nodes.begin());
        } else {
          auto in = std::find(sg.inputs.begin(), sg.inputs.end(), a.ref);
          const auto& src = g.nodes[a.ref];
          s += "i" + std::to_string(in - sg.inputs.begin()) + ":" +
               (src.op == "placeholder" ? src.placeholder_kind : std::string("v")) +
               std::to_string(src.out.shape.size());
        }
        break;
      }
      case K::list:
        s += "[";
        for (const auto& x : a.list) arg(x), s += ",";
        s += "]";
        break;
    }
  };
  for (int i : sg.nodes) {
    const auto& n = g.nodes[i];
    s += n.op;
    s += sg.owns(i) ? "*(" : "(";
    for (const auto& a : n.args) arg(a), s += ",";
    s += ")";
    s += ir::dtype_name(n.out.dtype);
    s += ";";
  }
  return s;
}

constexpr int kInput = 1 << 29;

// Global node refs <-> positions local to the subgraph (so one cached match serves every instance).
void to_local(Fusion& f, const Subgraph& sg) {
  f.for_each_ref([&](int& r) {
    if (r >= kNewNode) return;
    auto it = std::lower_bound(sg.nodes.begin(), sg.nodes.end(), r);
    if (it != sg.nodes.end() && *it == r) {
      r = static_cast<int>(it - sg.nodes.begin());
      return;
    }
    auto in = std::find(sg.inputs.begin(), sg.inputs.end(), r);
    if (in == sg.inputs.end()) throw std::logic_error("a fusion refers to a value outside its subgraph's reach");
    r = kInput + static_cast<int>(in - sg.inputs.begin());
  });
}

void to_global(Fusion& f, const Subgraph& sg) {
  f.for_each_ref([&](int& r) {
    if (r >= kNewNode) return;
    r = r >= kInput ? sg.inputs.at(r - kInput) : sg.nodes.at(r);
  });
}

struct CacheEntry {
  std::optional<Fusion> fusion;  // local refs
  Why why;
};

}  // namespace

bool Subgraph::contains(int i) const { return std::binary_search(nodes.begin(), nodes.end(), i); }
bool Subgraph::owns(int i) const { return std::binary_search(own.begin(), own.end(), i); }
std::vector<int> Subgraph::own_of(std::string_view op) const {
  std::vector<int> out;
  for (int i : own)
    if (graph->nodes[i].op == op) out.push_back(i);
  return out;
}

std::string_view shard_name(Shard s) {
  switch (s) {
    case Shard::none: return "replicated";
    case Shard::column: return "column";
    case Shard::row: return "row";
  }
  return "?";
}

void Fusion::for_each_ref(const std::function<void(int&)>& f) {
  for (auto& n : nodes) {
    for (auto& a : n.args) fusers::for_each_ref(a, f);
    if (n.place_before >= 0) f(n.place_before);
  }
  for (auto& [old, repl] : replaces) f(old);
  for (auto& w : weights)
    for (auto& s : w.sources) f(s);
  for (auto& s : shards) f(s.param);
}

std::optional<int64_t> HeadSection::per_rank(int64_t tp) const {
  if (tp <= 0 || heads <= 0) return std::nullopt;
  if (heads % tp == 0) return heads / tp * head_dim;
  if (replicable && heads < tp && tp % heads == 0) return head_dim;
  return std::nullopt;
}

std::string HeadSection::expr() const {
  if (heads == 1 && replicable) return std::to_string(head_dim);
  return replicable ? fmt::format("max(1,{}/tp)*{}", heads, head_dim) : fmt::format("{}/tp*{}", heads, head_dim);
}

Plan apply(const ir::Graph& g, const Options& options) {
  Plan plan;
  Report& rep = plan.report;
  rep.nodes_before = static_cast<int>(g.nodes.size());
  std::vector<const Fuser*> fusers;
  for (const Fuser* f : registry()) {
    const bool off = !options.enabled ||
                     std::find(options.disabled.begin(), options.disabled.end(), f->name()) != options.disabled.end();
    if (off) rep.disabled.emplace_back(f->name());
    else fusers.push_back(f);
  }
  for (const auto& d : options.disabled) {
    bool known = false;
    std::string names;
    for (const Fuser* f : registry()) {
      known = known || f->name() == d;
      names += (names.empty() ? "" : ", ") + std::string(f->name());
    }
    if (!known) throw std::runtime_error(fmt::format("unknown fuser '{}' (fusers: {})", d, names));
  }
  for (const Fuser* f : registry()) rep.totals[std::string(f->name())] = {0, 0};

  const auto users = build_users(g);
  const auto sgs = build_subgraphs(g, users);
  std::unordered_map<std::string, CacheEntry> cache;
  struct Accepted {
    Fusion fusion;
    const Fuser* fuser;
    int module;
  };
  std::vector<Accepted> accepted;
  std::unordered_map<int, std::string> replaced_by;  // graph node -> "fuser of module"

  for (const auto& sg : sgs) {
    if (sg.nodes.empty()) continue;
    const auto& mod = sg.mod();
    std::string sig;
    bool rewritten = false;
    for (const Fuser* fu : fusers) {
      if (!fu->additive() && rewritten) continue;
      ReportEntry e{mod.path.empty() ? "<root>" : mod.path, mod.cls, std::string(fu->name())};
      try {
        if (sig.empty()) sig = signature(sg);
        const std::string key = std::string(fu->name()) + "|" + mod.cls + "|" + sig;
        auto it = cache.find(key);
        if (it == cache.end()) {
          ++rep.cache_misses;
          CacheEntry ce;
          ce.fusion = fu->match(sg, ce.why);
          if (ce.fusion) to_local(*ce.fusion, sg);
          it = cache.emplace(key, std::move(ce)).first;
        } else {
          ++rep.cache_hits;
          e.cached = true;
        }
        if (!it->second.fusion && !it->second.why.applicable()) continue;
        auto& tot = rep.totals[e.fuser];
        ++tot.second;
        if (!it->second.fusion) {
          e.status = ReportEntry::Status::rejected;
          e.detail = it->second.why.str();
          rep.entries.push_back(e);
          continue;
        }
        Fusion f = *it->second.fusion;
        to_global(f, sg);
        Why why;
        if (!fu->validate(sg, f, why)) {
          e.status = ReportEntry::Status::rejected;
          e.detail = why.str();
          rep.entries.push_back(e);
          continue;
        }
        std::string overlap;
        for (const auto& [old, r] : f.replaces)
          if (auto o = replaced_by.find(old); o != replaced_by.end()) overlap = o->second;
        if (!overlap.empty()) {
          e.status = ReportEntry::Status::rejected;
          e.detail = "overlaps the " + overlap;
          rep.entries.push_back(e);
          continue;
        }
        for (const auto& [old, r] : f.replaces) replaced_by[old] = e.fuser + " fusion of " + e.module;
        for (auto& w : f.weights) {
          w.target = (mod.path.empty() ? "" : mod.path + ".") + w.name;
          for (int s : w.sources) w.source_targets.push_back(g.nodes[s].target);
        }
        for (auto& s : f.shards) s.target = g.nodes[s.param].target;
        e.detail = f.detail;
        rep.entries.push_back(e);
        ++tot.first;
        if (f.rewrites()) rewritten = true;
        accepted.push_back({std::move(f), fu, sg.module});
      } catch (const FusionError& err) {
        e.status = ReportEntry::Status::error;
        e.detail = err.what();
        rep.entries.push_back(e);
        rep.errors.push_back(err.what());
      }
    }
  }

  // Attention sites: one module per layer index, every index from 0 to the highest served.
  std::map<int64_t, std::string> layer_owner;
  for (const auto& a : accepted) {
    for (const auto& s : a.fusion.shards) plan.shards.push_back(s);
    if (!a.fusion.attention) continue;
    const auto& s = *a.fusion.attention;
    const std::string& path = g.modules[a.module].path;
    auto [it, fresh] = layer_owner.emplace(s.layer, path);
    if (!fresh) {
      rep.errors.push_back(fmt::format("layer index {} is claimed by two attention modules: {} and {}", s.layer,
                                       it->second, path));
      continue;
    }
    if (plan.attention.size() <= static_cast<size_t>(s.layer)) plan.attention.resize(s.layer + 1);
    plan.attention[s.layer] = s;
  }
  if (!layer_owner.empty()) {
    int64_t expect = 0;
    for (const auto& [idx, path] : layer_owner) {
      if (idx != expect) {
        rep.errors.push_back(fmt::format("no attention module serves layer index {} (the next, {}, is served by {})",
                                         expect, idx, path));
        break;
      }
      ++expect;
    }
  }

  // Rewrite: new nodes go right before the earliest node they replace.
  const size_t n = g.nodes.size();
  std::vector<std::vector<std::pair<size_t, size_t>>> insert_at(n);  // (accepted idx, new node k)
  std::vector<std::pair<size_t, int>> replacement(n, {SIZE_MAX, -1});  // (accepted idx, new k)
  for (size_t a = 0; a < accepted.size(); ++a) {
    const auto& f = accepted[a].fusion;
    if (!f.rewrites()) continue;
    int first = INT32_MAX;
    for (const auto& [old, r] : f.replaces) {
      first = std::min(first, old);
      replacement[old] = {a, r - kNewNode};
    }
    int at = first;
    for (size_t k = 0; k < f.nodes.size(); ++k) {
      at = std::max(at, f.nodes[k].place_before);
      insert_at[at].push_back({a, k});
    }
  }
  ir::Graph& out = plan.graph;
  out.version = g.version;
  out.capture_version = g.capture_version;
  out.modules = g.modules;
  out.op_args = g.op_args;
  out.op_args["fuselm.rms_norm.default"] = {"input", "weight", "eps", "weight_offset"};
  out.op_args["fuselm.act_and_mul.default"] = {"input", "activation"};
  out.op_args["fuselm.mla_attention.default"] = {"q", "latent", "k_rot", "w_up", "scaling", "layer_idx", "nope_dim", "v_dim"};
  out.op_args["fuselm.moe_route.default"] = {"input", "gate_weight", "correction_bias", "scoring", "groups",
                                             "topk_group", "group_score", "top_k", "renorm", "renorm_eps",
                                             "scaling"};
  out.parameters = g.parameters;
  out.constants = g.constants;
  out.model = g.model;
  std::vector<int> map(n, -1);
  std::vector<std::vector<int>> new_index(accepted.size());
  int counter = 0;
  auto remap_args = [&](std::vector<ir::Arg>& args, size_t a, int limit) {
    for (auto& arg : args)
      for_each_ref(arg, [&](int& r) {
        if (r >= kNewNode) r = new_index[a].at(r - kNewNode);
        else if (r >= limit || map[r] < 0) throw std::logic_error(fmt::format("fusion refers to node {} not yet emitted", r));
        else r = map[r];
      });
  };
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [a, k] : insert_at[i]) {
      auto& acc = accepted[a];
      {
        const auto& nn = acc.fusion.nodes[k];
        ir::Node node;
        node.index = static_cast<int>(out.nodes.size());
        node.op = nn.op;
        node.args = nn.args;
        remap_args(node.args, a, static_cast<int>(i));
        node.out_kind = nn.out_kind;
        node.out = nn.out;
        node.outs = nn.outs;
        node.module_stack = g.nodes[acc.fusion.replaces.front().first].module_stack;
        if (nn.weight >= 0) {
          node.module_stack.clear();
          node.placeholder_kind = "parameter";
          node.target = acc.fusion.weights[nn.weight].target;
          node.name = "p_fused_" + std::to_string(counter++);
          plan.weights.push_back(acc.fusion.weights[nn.weight]);
        } else {
          node.name = "fused_" + std::string(acc.fuser->name()) + "_" + std::to_string(counter++);
        }
        new_index[a].push_back(node.index);
        out.nodes.push_back(std::move(node));
      }
    }
    if (replacement[i].first != SIZE_MAX) {
      map[i] = new_index[replacement[i].first].at(replacement[i].second);
      continue;
    }
    ir::Node node = g.nodes[i];
    node.index = static_cast<int>(out.nodes.size());
    for (auto& arg : node.args)
      for_each_ref(arg, [&](int& r) {
        if (map[r] < 0) throw std::logic_error("a node refers to a removed value");
        r = map[r];
      });
    map[i] = node.index;
    out.nodes.push_back(std::move(node));
  }
  for (int o : g.outputs) out.outputs.push_back(map[o]);

  // Dead nodes: keep graph outputs, inputs and ops with effects (attention writes the KV cache;
  // in-place ATen ops such as copy_ or scatter_ write into a tensor that later nodes read under
  // its original name (MLA's key assembly, routers), so their own unused result says nothing).
  // The experts ops are pure: an experts op a fused fuselm.experts_shared replaced must die, or
  // the routed experts would run twice.
  auto in_place = [](const std::string& op) {
    const auto dot = op.rfind('.');
    return op.rfind("aten.", 0) == 0 && dot != std::string::npos && dot > 5 && op[dot - 1] == '_' && op[5] != '_';
  };
  std::vector<char> live(out.nodes.size(), 0);
  for (int o : out.outputs) live[o] = 1;
  for (auto& node : out.nodes)
    if ((node.op == "placeholder" && node.placeholder_kind == "input") || node.op.rfind("fuselm.attention", 0) == 0 ||
        node.op.rfind("fuselm.mla_attention", 0) == 0)
      live[node.index] = 1;
  // An in-place op writes into a view of a base that a later node reads: it lives exactly when
  // that base does. Its readers come after it, so in this backward sweep the base's
  // liveness is settled when the copy is reached; an expansion the mla fuser bypassed dies whole.
  auto view_base = [&](int r) {
    static const std::set<std::string> kViews = {"aten.slice.Tensor", "aten.view.default", "aten.transpose.int",
                                                 "aten.select.int", "aten.unsqueeze.default", "aten.permute.default",
                                                 "aten.alias.default", "aten.narrow.default", "aten.squeeze.dim",
                                                 "aten.expand.default", "aten.as_strided.default"};
    while (kViews.count(out.nodes[r].op) && !out.nodes[r].args.empty() &&
           out.nodes[r].args[0].kind == ir::Arg::Kind::ref)
      r = out.nodes[r].args[0].ref;
    return r;
  };
  for (int i = static_cast<int>(out.nodes.size()) - 1; i >= 0; --i) {
    const auto& node = out.nodes[i];
    if (!live[i] && in_place(node.op) && !node.args.empty() && node.args[0].kind == ir::Arg::Kind::ref &&
        live[view_base(node.args[0].ref)])
      live[i] = 1;
    if (live[i])  // a read through a view (transpose(key) built before the copies) keeps its base too
      for (const auto& a : out.nodes[i].args) for_each_ref_const(a, [&](int r) { live[r] = live[view_base(r)] = 1; });
  }
  std::vector<int> keep(out.nodes.size(), -1);
  std::vector<ir::Node> kept;
  for (auto& node : out.nodes) {
    if (!live[node.index]) continue;
    keep[node.index] = static_cast<int>(kept.size());
    node.index = keep[node.index];
    for (auto& a : node.args) for_each_ref(a, [&](int& r) { r = keep[r]; });
    kept.push_back(std::move(node));
  }
  out.nodes = std::move(kept);
  for (auto& o : out.outputs) o = keep[o];
  for (const auto& node : out.nodes) out.index_by_name[node.name] = node.index;
  rep.nodes_after = static_cast<int>(out.nodes.size());
  return plan;
}

}  // namespace fuselm::fusers
