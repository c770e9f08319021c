#pragma once
// Runs a captured graph on the flattened token batch: resolves each node's arguments, calls its
// op, and recycles activation buffers after a value's last use (buffer_pool.h).
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/batch.h"
#include "runtime/buffer_pool.h"
#include "runtime/op_context.h"
#include "runtime/op_registry.h"
#include "runtime/sym_expr.h"
#include "runtime/value.h"

namespace fuselm::runtime {

class Executor {
 public:
  /// params/constants: placeholder target -> tensor (weights may be bf16/f16; the memory must
  /// outlive the executor). f32 and bf16 weights of linear/addmm are packed here, once, for the linear
  /// kernels where the ISA path has a packed layout (kernels::PackedLinearWeights). Values computed from params and constants alone are made here (ir/invariant_nodes.h).
  /// Throws std::runtime_error naming the first op the engine lacks (or an op failing on them), with
  /// its module path, or a placeholder without a tensor. comm: the communicator of the graph's
  /// collectives under tensor parallelism (op_context.h; it must outlive the executor), or nullptr.
  Executor(const ir::Graph& graph, const std::map<std::string, Tensor>& params,
           const std::map<std::string, Tensor>& constants, dist::Communicator* comm = nullptr);

  /// Graph inputs in the order run() takes them ("input_ids", "position_ids", ...).
  std::vector<std::string> input_targets() const;

  /// Runs the graph. inputs: one tensor per input_targets() entry, in that order (for causal LMs,
  /// [1, num_tokens] i64 ids and positions). Returns the first graph output (logits
  /// [1, num_tokens, vocab]), valid until the next run.
  const Tensor& run(std::span<const Tensor> inputs, const Batch& batch);
  /// Graph output k of the last run() (0 is what run() returned), valid until the next run.
  /// Throws std::out_of_range for a k past the outputs or an output that is not a tensor.
  const Tensor& output(size_t k) const;

  /// How many nodes run once, at construction, and keep their value (ir/invariant_nodes.h).
  size_t invariant_count() const;

  const Batch& batch() const { return ctx_.batch(); }
  /// The communicator the graph's collectives use (tensor parallelism; op_context.h). Must
  /// outlive the executor.
  void set_comm(dist::Communicator* c) { ctx_.set_comm(c); }
  const SymbolValues& symbols() const { return symbols_; }
  const ir::Graph& graph() const { return graph_; }
  BufferPool& pool() { return pool_; }
  Tensor alloc(DType dtype, std::span<const int64_t> shape);
  [[noreturn]] void fail(const ir::Node& node, const std::string& msg) const;
  /// "model.layers.0.self_attn" (innermost module of the node) or "<root>".
  std::string module_of(const ir::Node& node) const;

 private:
  void resolve(const ir::Arg& a, Value& v);
  void pack_weights();
  void hold_invariants();
  void schedule_frees();
  void run_node(const ir::Node& node);
  void retain(const Value& v);
  void drop(Value& v);

  const ir::Graph& graph_;
  std::vector<const OpFn*> fns_;
  std::vector<int> last_use_;               // node index -> index of its last consumer
  std::vector<std::vector<int>> frees_at_;  // node index -> values whose last use it is
  std::vector<Value> values_;
  std::vector<std::vector<Value>> args_;
  std::vector<int> input_nodes_;
  BufferPool pool_;
  SymbolValues symbols_;
  OpContext ctx_{pool_, graph_};  // what ops see (after pool_: it holds a reference)
  std::vector<Value*> held_outputs_;  // every graph output of the last run, dropped at the next
  std::vector<bool> invariant_;       // node index -> computed once, at construction (ir/invariant_nodes.h)
};

}  // namespace fuselm::runtime
