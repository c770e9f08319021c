#pragma once
// Fusers: find a module's structure in the captured graph by dataflow and shapes, and say how to
// run it on fused kernels (docs/fusers.md). Fusers know only the IR; the engine applies the plan.
//
//   Subgraph   the nodes of one module call: every node whose module stack contains the module
//              (its own nodes and its children's), with the values it reads from outside
//              (inputs) and the values read outside it (outputs). A fuser anchors its match on
//              the module's *own* nodes (innermost stack entry = the module), so a decoder layer
//              never re-matches the norm inside it.
//   Fuser      match(subgraph, why) -> the whole plan as a value, or nullopt with a reason;
//              validate(subgraph, fusion, why) checks one instance's own shapes (runs for every
//              instance, also when the match came from the cache).
//   Fusion     replacement nodes, the nodes they replace, weight transforms (parameters stacked
//              into one fused tensor along an axis) with their tensor-parallel sharding, and
//              additive records (attention sites). Node references are graph node indices;
//              kNewNode + k refers to the fusion's own k-th new node.
//   apply      (plan.h) matches every module with the registry (each fuser registers itself with
//              its order, register_fuser), rewrites a copy of the graph
//              (fused nodes in place of the matched roots, dead nodes removed, refs renumbered)
//              and reports every fusion and fallback.
#include <fmt/core.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ir/graph.h"

namespace fuselm::fusers {

inline constexpr int kNewNode = 1 << 30;
inline int new_ref(int k) { return kNewNode + k; }

/// One module's slice of the graph (see the header comment). All indices are graph node indices.
struct Subgraph {
  const ir::Graph* graph = nullptr;
  const std::vector<std::vector<int>>* users = nullptr;  // node -> nodes that read it (graph-wide)
  int module = -1;                                       // index into graph->modules
  std::vector<int> nodes;    // topological order
  std::vector<int> own;      // nodes whose innermost module is this one
  std::vector<int> inputs;   // values read from outside, in order of first use
  std::vector<int> outputs;  // nodes read outside the subgraph (or graph outputs)

  const ir::Node& node(int i) const { return graph->nodes[i]; }
  const ir::Module& mod() const { return graph->modules[module]; }
  bool contains(int i) const;
  bool owns(int i) const;
  const std::vector<int>& users_of(int i) const { return (*users)[i]; }
  /// Own nodes whose op is `op`.
  std::vector<int> own_of(std::string_view op) const;
};

/// What Why::reject returns: converts to an empty optional (match) or false (validate).
/// The bool conversion is for bool alone: an optional<int> or an aggregate must not be built from
/// a rejection's false.
struct Rejected {
  template <typename T>
  operator std::optional<T>() const { return std::nullopt; }
  template <typename B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
  operator B() const { return false; }
};

/// Why a fuser did not match: formatted only when read. `reject` returns an empty result so a
/// fuser writes `return why.reject("gate width {} != up width {}", a, b);`.
class Why {
 public:
  template <typename... A>
  Rejected reject(fmt::format_string<A...> f, A&&... args) {
    const fmt::string_view sv = f;
    std::string_view fs(sv.data(), sv.size());
    text_ = [fs, ... a = std::decay_t<A>(args)] { return fmt::format(fmt::runtime(fs), a...); };
    applicable_ = true;
    return {};
  }
  /// The module has nothing this fuser looks for (no anchor): not a candidate, not reported.
  std::nullopt_t not_applicable() {
    applicable_ = false;
    text_ = nullptr;
    return std::nullopt;
  }
  bool applicable() const { return applicable_; }
  std::string str() const { return text_ ? text_() : std::string(); }

 private:
  std::function<std::string()> text_;
  bool applicable_ = true;
};

/// Tensor-parallel role of a fused weight (used by TP later): column = output rows split across
/// ranks (per-rank [A_r; B_r] for stacked weights), row = input columns split, then all-reduce.
enum class Shard : uint8_t { none, column, row };
std::string_view shard_name(Shard s);

/// A block of columns that tensor parallelism divides by heads: heads × head_dim in the capture,
/// per rank (heads / tp) × head_dim. A section that may be replicated (k, v) keeps one head per
/// rank when there are fewer heads than ranks (MQA's single KV head), as vLLM does.
struct HeadSection {
  std::string role;  // "q", "k" or "v"
  int64_t heads = 0, head_dim = 0;
  bool replicable = false;

  int64_t size() const { return heads * head_dim; }
  /// Columns on each of tp ranks; nullopt when the heads do not divide among tp ranks.
  std::optional<int64_t> per_rank(int64_t tp) const;
  /// The per-rank size as an expression over tp: "4/tp*16", "max(1,2/tp)*16", "16" (one head).
  std::string expr() const;
};

/// A tensor-parallel note on a parameter the fusion keeps as it is (no new tensor): how TP will
/// split it. Column by sections: each rank takes its share of every section, [q_r; k_r; v_r].
struct ShardNote {
  int param = -1;          // parameter placeholder node
  std::string target;      // filled by the driver
  Shard shard = Shard::none;
  int axis = 0;            // the weight axis TP splits (output axis for column, input for row)
  std::vector<HeadSection> sections;  // column parallel by sections (empty: an even split)
};

/// A new parameter made at load from checkpoint tensors: concat(sources, axis), in the weights'
/// storage dtype. `target` is module path + "." + `name` (the driver prefixes the path).
struct WeightTransform {
  std::string name;               // e.g. "__fused_gate_up.weight"
  std::string target;             // filled by the driver
  std::vector<int> sources;       // parameter placeholder node indices
  std::vector<std::string> source_targets;  // filled by the driver
  int axis = 0;
  std::vector<int64_t> shape;     // the stacked shape
  Shard shard = Shard::none;
  std::vector<HeadSection> sections;  // column parallel: one per source, each rank takes its share of each
};

/// A node the rewrite inserts. Args' refs are graph node indices or new_ref(k) for an earlier new
/// node of the same fusion. A placeholder for a weight transform has op "placeholder" and
/// `weight` = its index in Fusion::weights.
struct NewNode {
  std::string op;
  std::vector<ir::Arg> args;
  ir::Node::Out out_kind = ir::Node::Out::tensor;
  ir::TensorMeta out;
  std::vector<ir::TensorMeta> outs;
  int weight = -1;
  /// Graph node this one goes right before (default: the earliest node the fusion replaces).
  /// Lets one fusion replace an early node (a projection) and a late one (its attention op) whose
  /// replacement reads values computed in between. Positions never go back within a fusion.
  int place_before = -1;
};

/// An argument of a graph node that a fusion sets without replacing the node (an additive fusion
/// writes the resolved layer index into the attention op). `arg` names the argument in the op's
/// definition (ir/op_defs.h).
struct ArgUpdate {
  int node = -1;
  std::string arg;
  ir::Arg value;
};

/// An attention site (the additive attention fusion): one per fuselm.attention op, so one KV layer.
struct AttentionSite {
  int64_t layer = -1;
  double scale = 0.0;
  int64_t sliding_window = -1;
  int64_t chunk_size = -1;
  std::string mask;  // the layer's mask kind read at capture: causal | sliding | chunked
  double softcap = 0.0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  std::string layer_source;  // "call order" (capture numbered the op) | "module attribute"
};

struct Fusion {
  std::vector<NewNode> nodes;
  std::vector<std::pair<int, int>> replaces;  // (graph node, new_ref(k)) : consumers are redirected
  std::vector<WeightTransform> weights;
  std::vector<AttentionSite> attention;  // one per attention op of the module, in graph order
  std::vector<ShardNote> shards;  // TP notes on parameters kept as they are
  std::vector<ArgUpdate> updates;  // arguments set on graph nodes the fusion keeps
  std::string detail;  // one line for inspect, e.g. "act=silu rows=2x1536 down=yes"

  bool rewrites() const { return !replaces.empty(); }
  /// Calls f on every node reference the fusion holds (for the cache's local renumbering).
  void for_each_ref(const std::function<void(int&)>& f);
};

class Fuser {
 public:
  virtual ~Fuser() = default;
  virtual std::string_view name() const = 0;
  /// Additive fusions attach to a module and never rewrite; several may apply to one module.
  virtual bool additive() const { return false; }
  /// A rewriting fuser of one op-level pattern (rope) whose nodes no module-level fuser replaces:
  /// it may rewrite a module that another fusion already rewrote (the overlap check still applies).
  virtual bool composes() const { return false; }
  /// Structure only (cached per module class and structure signature).
  virtual std::optional<Fusion> match(const Subgraph& sg, Why& why) const = 0;
  /// What the cache key does not hold (module attributes such as layer_idx); may fill instance
  /// data into the fusion. The key holds every shape, so sizes belong to match.
  virtual bool validate(const Subgraph& sg, Fusion& f, Why& why) const {
    (void)sg, (void)f, (void)why;
    return true;
  }
  /// A fuser whose absence costs memory or speed the user should hear about (latent attention:
  /// a larger KV cache) names what it provides and what runs instead; the driver warns for each
  /// module it would fuse when it is disabled, and for each module it rejects.
  struct Fallback {
    std::string_view provides;  // "latent attention"
    std::string_view instead;   // "running full attention"
  };
  virtual std::optional<Fallback> fallback() const { return std::nullopt; }
};

/// Thrown for a fusion that would be wrong (an unresolvable attention scale, two modules with one
/// layer index): never a silent fallback.
struct FusionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The registry: every registered fuser by its order (registry.cc). Built on first use, after
/// static initialisation; throws std::logic_error when two fusers share an order or a name.
std::span<const Fuser* const> registry();

/// Adds `f` to the registry at `order` (lower runs first: rewriting module-level fusers, then
/// composing ones, then additive ones; docs/fusers.md, "The registry"). Called once per fuser,
/// from a namespace-scope initialiser in the fuser's own file:
///   [[maybe_unused]] const bool kRegistered = register_fuser(rope_fuser(), 80);
/// Returns true (the initialiser's value).
bool register_fuser(const Fuser& f, int order);

}  // namespace fuselm::fusers
