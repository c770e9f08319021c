#include "kv/block_allocator.h"

namespace fuselm::kv {

BlockAllocator::BlockAllocator(int32_t num_blocks) : num_blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void BlockAllocator::free(int32_t block) { free_.push_back(block); }

}  // namespace fuselm::kv
