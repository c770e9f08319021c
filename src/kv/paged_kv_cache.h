#pragma once
// The engine-owned KV cache, paged by slot: for each layer, K rows [num_slots, k_width] and V rows
// [num_slots, v_width] in f32, where slot = block * block_size + offset and k_width = Hkv * Dqk.
// Attention reads a sequence's context through its slot list, so a contiguous cache and a paged
// one look the same to it.
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/block_allocator.h"

namespace fuselm::kv {

struct LayerShape {
  int64_t k_width = 0;  // floats per slot for K (kv heads x q/k head size)
  int64_t v_width = 0;  // floats per slot for V (kv heads x v head size)
};

class PagedKvCache {
 public:
  /// Allocates num_blocks * block_size slots for every layer. Throws std::bad_alloc.
  PagedKvCache(std::vector<LayerShape> layers, int32_t num_blocks, int32_t block_size);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const LayerShape& layer_shape(int layer) const { return layers_.at(layer); }
  float* k(int layer) { return k_[layer].get(); }
  float* v(int layer) { return v_[layer].get(); }
  int32_t block_size() const { return block_size_; }
  int64_t num_slots() const { return int64_t{allocator_.num_blocks()} * block_size_; }
  BlockAllocator& allocator() { return allocator_; }
  /// Bytes of KV per token over all layers.
  int64_t bytes_per_token() const;

 private:
  std::vector<LayerShape> layers_;
  int32_t block_size_;
  BlockAllocator allocator_;
  std::vector<std::unique_ptr<float[]>> k_, v_;
};

/// One sequence's KV blocks and the slot of each of its positions.
class SequenceKv {
 public:
  /// Makes room for `length` positions; false (nothing changed) when blocks run out.
  bool reserve(int64_t length, PagedKvCache& cache);
  /// Returns every block to the allocator.
  void release(PagedKvCache& cache);
  const int32_t* slots() const { return slots_.data(); }
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

 private:
  std::vector<int32_t> blocks_;
  std::vector<int32_t> slots_;
};

}  // namespace fuselm::kv
