// The driver: which fusers run, matching every module (through the cache) and accepting
// fusions, the rewrite, the attention sites and KV layers, and the fallback warnings.
#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "fusers/driver.h"

namespace fuselm::fusers {
namespace {

using driver::Accepted;

// The enabled fusers in registry order; every disabled one is listed in the report. An unknown
// name in `disabled` is an error listing the fusers.
std::vector<const Fuser*> enabled_fusers(const Options& options, Report& rep) {
  std::string names;
  for (const Fuser* f : registry()) names += (names.empty() ? "" : ", ") + std::string(f->name());
  for (const auto& d : options.disabled) {
    const auto r = registry();
    if (std::none_of(r.begin(), r.end(), [&](const Fuser* f) { return f->name() == d; }))
      throw std::runtime_error(fmt::format("unknown fuser '{}' (fusers: {})", d, names));
  }
  std::vector<const Fuser*> on;
  for (const Fuser* f : registry()) {
    rep.totals[std::string(f->name())] = {0, 0};
    const bool off = !options.enabled ||
                     std::find(options.disabled.begin(), options.disabled.end(), f->name()) != options.disabled.end();
    if (off) rep.disabled.emplace_back(f->name());
    else on.push_back(f);
  }
  return on;
}

// Matching: every module, every enabled fuser in registry order (at most one rewriting fusion
// per module, additive and composing ones alongside), through the cache, then this instance's validate.
class Matcher {
 public:
  Matcher(const ir::Graph& g, Report& rep) : g_(g), rep_(rep), users_(driver::build_users(g)) {
    sgs_ = driver::build_subgraphs(g, users_);
  }

  std::vector<Accepted> run(const std::vector<const Fuser*>& fusers) {
    for (const auto& sg : sgs_) {
      if (sg.nodes.empty()) continue;
      std::string sig;
      bool rewritten = false;
      for (const Fuser* fu : fusers) {
        const bool exclusive = !fu->additive() && !fu->composes();
        if (exclusive && rewritten) continue;
        if (sig.empty()) sig = driver::signature(sg);
        const bool hit = one(*fu, sg, sig);
        rewritten = (exclusive && hit) || rewritten;
      }
    }
    return std::move(accepted_);
  }

 private:
  // One (module, fuser) check; true when a rewriting fusion was accepted.
  bool one(const Fuser& fu, const Subgraph& sg, const std::string& sig) {
    const auto& mod = sg.mod();
    ReportEntry e{mod.path.empty() ? "<root>" : mod.path, mod.cls, std::string(fu.name())};
    try {
      bool hit = false;
      const auto& entry = cache_.lookup(fu, sg, sig, hit);
      (hit ? rep_.cache_hits : rep_.cache_misses)++;
      e.cached = hit;
      if (!entry.fusion && !entry.why.applicable()) return false;
      ++rep_.totals[e.fuser].second;
      if (!entry.fusion) return reject(e, fu, entry.why.str());
      Fusion f = driver::MatchCache::instantiate(*entry.fusion, sg);
      Why why;
      if (!fu.validate(sg, f, why)) return reject(e, fu, why.str());
      for (const auto& [old, r] : f.replaces)
        if (auto o = replaced_by_.find(old); o != replaced_by_.end()) return reject(e, fu, "overlaps the " + o->second);
      accept(e, fu, sg, std::move(f));
      return !accepted_.back().fusion.replaces.empty();
    } catch (const FusionError& err) {
      e.status = ReportEntry::Status::error;
      e.detail = err.what();
      rep_.entries.push_back(e);
      rep_.errors.push_back(err.what());
      return false;
    }
  }

  bool reject(ReportEntry& e, const Fuser& fu, std::string reason) {
    e.status = ReportEntry::Status::rejected;
    e.detail = std::move(reason);
    if (auto fb = fu.fallback())
      rep_.warnings.push_back(fmt::format("{}: {} not fused ({}); {}", e.module, fb->provides, e.detail, fb->instead));
    rep_.entries.push_back(e);
    return false;
  }

  void accept(ReportEntry& e, const Fuser& fu, const Subgraph& sg, Fusion f) {
    const auto& path = sg.mod().path;
    for (const auto& [old, r] : f.replaces) replaced_by_[old] = e.fuser + " fusion of " + e.module;
    for (auto& w : f.weights) {
      w.target = (path.empty() ? "" : path + ".") + w.name;
      for (int s : w.sources) w.source_targets.push_back(g_.nodes[s].target);
    }
    for (auto& s : f.shards) s.target = g_.nodes[s.param].target;
    e.detail = f.detail;
    rep_.entries.push_back(e);
    ++rep_.totals[e.fuser].first;
    accepted_.push_back({std::move(f), &fu, sg.module});
  }

  const ir::Graph& g_;
  Report& rep_;
  std::vector<std::vector<int>> users_;
  std::vector<Subgraph> sgs_;
  driver::MatchCache cache_;
  std::vector<Accepted> accepted_;
  std::unordered_map<int, std::string> replaced_by_;  // graph node -> "fuser of module"
};

// Disabled fusers with a fallback (Fuser::fallback): a dry run says which modules they would
// have served, so turning one off is never silent.
void warn_disabled(const ir::Graph& g, const Report& rep, std::vector<std::string>& warnings,
                   const Options& options) {
  std::vector<const Fuser*> probe;
  for (const Fuser* f : registry())
    if (f->fallback() && std::find(rep.disabled.begin(), rep.disabled.end(), f->name()) != rep.disabled.end())
      probe.push_back(f);
  if (probe.empty()) return;
  Report dry;
  Matcher m(g, dry);
  for (const auto& a : m.run(probe)) {
    const auto fb = a.fuser->fallback();
    warnings.push_back(fmt::format("{}: {} turned off ({}); {}", g.modules[a.module].path, fb->provides,
                                   options.enabled ? fmt::format("--disable-fuser {}", a.fuser->name()) : "--no-fuse",
                                   fb->instead));
  }
}

}  // namespace

Plan apply(const ir::Graph& g, const Options& options) {
  Plan plan;
  Report& rep = plan.report;
  rep.nodes_before = static_cast<int>(g.nodes.size());
  const auto fusers = enabled_fusers(options, rep);
  if (fusers.empty()) {
    plan.graph = g;
  } else {
    auto accepted = Matcher(g, rep).run(fusers);
    plan.attention = driver::attention_sites(accepted);
    for (const auto& a : accepted)
      for (const auto& s : a.fusion.shards) plan.shards.push_back(s);
    plan.graph = driver::rewrite(g, accepted, plan.weights);
  }
  warn_disabled(g, rep, rep.warnings, options);
  plan.kv = kv_layers(plan.graph, rep.errors);
  rep.nodes_after = static_cast<int>(plan.graph.nodes.size());
  return plan;
}

}  // namespace fuselm::fusers
