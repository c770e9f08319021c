#pragma once
// The steps of the fusion driver (apply.cc runs them in order; docs/fusers.md "The driver"):
//   subgraphs  one per module, with a graph-wide user list        (subgraph.cc)
//   cache      structure-and-shape keys, refs local to a subgraph  (match_cache.cc)
//   rewrite    fused nodes in, replaced nodes out, dead nodes removed (rewrite.cc)
//   sites      attention sites and the KV layers of the result     (kv_layers.cc)
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusers/plan.h"

namespace fuselm::fusers::driver {

/// node -> the nodes that read it (graph-wide, each reader once).
std::vector<std::vector<int>> build_users(const ir::Graph& g);
/// One subgraph per module of g (docs/fusers.md "Subgraphs").
std::vector<Subgraph> build_subgraphs(const ir::Graph& g, const std::vector<std::vector<int>>& users);

/// Calls f on every node reference in a (lists included).
void for_each_ref(ir::Arg& a, const std::function<void(int&)>& f);
void for_each_ref(const ir::Arg& a, const std::function<void(int)>& f);

/// Matches of one fuser on one module's structure, shared by every module with the same key:
/// fuser, module class and signature (ops, literals, dataflow, dtypes and every shape; no names).
class MatchCache {
 public:
  struct Entry {
    std::optional<Fusion> fusion;  // refs local to the subgraph it was matched on
    Why why;
  };
  /// The match of `fuser` on sg, from the cache or by running match (then stored). `hit` says which.
  const Entry& lookup(const Fuser& fuser, const Subgraph& sg, const std::string& signature, bool& hit);
  /// The cached fusion with refs mapped to sg's own nodes.
  static Fusion instantiate(const Fusion& cached, const Subgraph& sg);

 private:
  std::unordered_map<std::string, Entry> entries_;
};

/// The cache signature of sg (see MatchCache).
std::string signature(const Subgraph& sg);

/// A fusion the driver accepted for a module.
struct Accepted {
  Fusion fusion;
  const Fuser* fuser = nullptr;
  int module = -1;
};

/// The rewritten graph: each fusion's new nodes right before the earliest node it replaces (or
/// their place_before), consumers of replaced nodes redirected, argument updates applied, fused
/// weights' placeholders added (their transforms appended to `weights`), dead nodes removed and
/// refs renumbered.
ir::Graph rewrite(const ir::Graph& g, std::vector<Accepted>& accepted, std::vector<WeightTransform>& weights);

/// Removes the nodes no output, input or op with effects needs (in place; refs renumbered).
void remove_dead(ir::Graph& out);

/// The attention sites of the accepted fusions, by layer index (the first of a layer claimed twice;
/// kv_layers reports that as an error).
std::vector<AttentionSite> attention_sites(const std::vector<Accepted>& accepted);

}  // namespace fuselm::fusers::driver
