#pragma once
// What an op may use besides its arguments: an allocator on the device it runs on, the batch of
// sequences (for the ops that see sequences: attention), the tensor-parallel communicator (for the
// collectives the shard plan inserts), and the error context that names the op, its module and
// node. Ops never see the Executor.
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "ir/graph.h"
#include "kernels/cpu/linear.h"
#include "runtime/batch.h"
#include "runtime/buffer_pool.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace fuselm::dist {
class Communicator;
}

namespace fuselm::runtime {

class OpContext {
 public:
  /// pool: the allocator (its device is the ops' device); graph: for module paths in errors.
  OpContext(BufferPool& pool, const ir::Graph& graph) : pool_(pool), graph_(graph) {}

  /// A contiguous tensor in a pool buffer on device(); the buffer returns to the pool when the
  /// value holding the tensor dies (or through release).
  Tensor alloc(DType dtype, std::span<const int64_t> shape);
  /// Returns a buffer from alloc to the pool early (a temporary the op no longer reads).
  void release(Buffer* b) { pool_.release(b); }
  Device device() const { return pool_.device(); }
  /// The sequences of the running step.
  const Batch& batch() const { return batch_; }
  void set_batch(const Batch& b) { batch_ = b; }
  /// The communicator of this rank's tensor-parallel job (set by the model that owns the executor
  /// under TP). Throws std::runtime_error naming the op when none was set: a graph with
  /// collectives run outside tensor parallelism.
  dist::Communicator& comm(const ir::Node& node) const;
  void set_comm(dist::Communicator* c) { comm_ = c; }
  /// "model.layers.0.self_attn" (innermost module of the node) or "<root>".
  std::string module_of(const ir::Node& node) const;
  /// Throws std::runtime_error "op X in module M (node 'N'): msg".
  [[noreturn]] void fail(const ir::Node& node, const std::string& msg) const;
  /// The weight at `data` packed once at load for the linear kernels (Executor packs the f32 and
  /// bf16 weights of linear and addmm where the ISA path has a packed layout), or nullptr.
  const kernels::PackedLinearWeights* packed_weights(const void* data) const {
    if (packed_.empty()) return nullptr;
    auto it = packed_.find(data);
    return it == packed_.end() ? nullptr : it->second.get();
  }
  void add_packed_weights(const void* data, std::unique_ptr<kernels::PackedLinearWeights> w) {
    packed_[data] = std::move(w);
  }

 private:
  BufferPool& pool_;
  const ir::Graph& graph_;
  Batch batch_;
  dist::Communicator* comm_ = nullptr;
  std::unordered_map<const void*, std::unique_ptr<kernels::PackedLinearWeights>> packed_;
};

}  // namespace fuselm::runtime
