#pragma once
// What the fusion driver returns (apply): the rewritten graph, the weight transforms to make at
// load, the attention sites and KV layers, the TP notes, and the report that inspect prints.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fusers/fuser.h"

namespace fuselm::fusers {

struct Options {
  bool enabled = true;
  std::vector<std::string> disabled;  // fuser names; unknown names are an error
};

struct ReportEntry {
  std::string module, cls, fuser;
  enum class Status { fused, rejected, error } status = Status::fused;
  std::string detail;  // the fusion's detail or the rejection reason
  bool cached = false;
};

struct Report {
  std::vector<ReportEntry> entries;  // module order, then registry order
  std::map<std::string, std::pair<int, int>> totals;  // fuser -> (applied, candidates)
  std::vector<std::string> errors;
  std::vector<std::string> disabled;
  int nodes_before = 0, nodes_after = 0;
  int cache_hits = 0, cache_misses = 0;
  /// Fallbacks the user should hear about (Fuser::fallback): "<module>: latent attention not
  /// fused (<reason>); running full attention". The engine prints them; inspect reports entries.
  std::vector<std::string> warnings;
};

/// The KV cache rows of one layer: those of the op that writes it (ir/op_defs.h, KvRows).
/// k_width/v_width are floats per token; latent layers have one row [latent | rope], v_width 0.
struct KvLayer {
  int64_t k_width = 0, v_width = 0;
  // Head sizes within the rows; for a latent row k_head is the latent's width (the rest of the
  // row is the rope key), and v_head 0.
  int64_t k_head = 0, v_head = 0;
  bool latent = false;
  std::string module;  // the module whose op writes the layer
};

struct Plan {
  ir::Graph graph;                        // the rewritten graph (the captured one when fusion is off)
  std::vector<WeightTransform> weights;   // made at load, keyed by target
  std::vector<AttentionSite> attention;   // by layer index, from the attention fusion
  std::vector<KvLayer> kv;                // by layer index, from the ops of `graph` that write the cache
  std::vector<ShardNote> shards;          // TP notes, keyed by target
  Report report;
};

/// Runs every enabled fuser over every module of g and rewrites a copy (with fusion off, the graph
/// is returned as captured). Never throws for a fuser that does not match; fusion errors, and KV
/// layers claimed twice or missing, are collected in report.errors (the engine refuses to load a
/// graph with errors; inspect prints them). Throws std::runtime_error for an unknown fuser name.
Plan apply(const ir::Graph& g, const Options& options = {});

/// The KV layers of g: one per layer index of the ops that write the cache (ir::OpDef::kv),
/// with their row widths. Ops of one index that read the very same k and v values (or latent and
/// rope key) under the same mask share that layer (KV sharing: a later layer attends over the K/V
/// an earlier one made). A layer index that is negative, otherwise claimed by two modules, served
/// twice by one module, or (in a graph without stateful ops) missing between 0 and the highest is appended
/// to `errors` (one line naming the modules). In a graph with stateful ops (a hybrid) a missing
/// index gets a layer of no rows (widths 0, module "").
std::vector<KvLayer> kv_layers(const ir::Graph& g, std::vector<std::string>& errors);

/// "fuser: applied of candidates modules" lines and per-module lines (inspect's text output).
std::string format_report(const Report& r);
nlohmann::json report_json(const Report& r);

}  // namespace fuselm::fusers
