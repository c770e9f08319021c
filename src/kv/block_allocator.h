#pragma once
// Fixed-size KV blocks handed out to sequences (vLLM's block manager, without prefix sharing yet).
#include <cstdint>
#include <vector>

namespace fuselm::kv {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);
  /// A free block id, or -1 when the cache is full.
  int32_t allocate();
  void free(int32_t block);
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_blocks() const { return num_blocks_; }

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;
};

}  // namespace fuselm::kv
