#include "kv/paged_kv_cache.h"

namespace fuselm::kv {

int64_t kv_bytes_per_token(const std::vector<LayerShape>& layers) {
  int64_t b = 0;
  for (const auto& l : layers) b += (l.k_width + l.v_width) * int64_t{sizeof(float)};
  return b;
}

PagedKvCache::PagedKvCache(std::vector<LayerShape> layers, int32_t num_blocks, int32_t block_size)
    : layers_(std::move(layers)), pool_(num_blocks, block_size) {
  const int64_t slots = int64_t{num_blocks} * block_size;
  for (const auto& l : layers_) {
    k_.emplace_back(l.k_width ? new float[slots * l.k_width] : nullptr);
    v_.emplace_back(l.v_width ? new float[slots * l.v_width] : nullptr);
  }
}

bool SequenceKv::reserve(int64_t length, PagedKvCache& cache) {
  const int32_t bs = cache.block_size();
  const int64_t need_blocks = (length + bs - 1) / bs;
  const size_t had = blocks_.size();
  while (static_cast<int64_t>(blocks_.size()) < need_blocks) {
    int32_t b = cache.pool().allocate();
    if (b < 0) {
      while (blocks_.size() > had) {
        cache.pool().release(blocks_.back());
        blocks_.pop_back();
      }
      return false;
    }
    blocks_.push_back(b);
  }
  for (size_t bi = had; bi < blocks_.size(); ++bi)
    for (int32_t o = 0; o < bs; ++o) slots_.push_back(blocks_[bi] * bs + o);
  return true;
}

void SequenceKv::release(PagedKvCache& cache) {
  for (int32_t b : blocks_) cache.pool().release(b);
  blocks_.clear();
  slots_.clear();
}

}  // namespace fuselm::kv
