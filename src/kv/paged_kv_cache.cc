#include "kv/paged_kv_cache.h"

#include <stdexcept>

namespace fuselm::kv {

KvDType parse_kv_dtype(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "auto") return KvDType::f32;
  if (name == "bf16" || name == "bfloat16") return KvDType::bf16;
  throw std::invalid_argument("--kv-cache-dtype: '" + name + "' is not a KV cache dtype (f32 or bf16)");
}

const char* kv_dtype_name(KvDType d) { return d == KvDType::bf16 ? "bf16" : "f32"; }

int64_t kv_bytes_per_token(const std::vector<LayerShape>& layers, KvDType dtype) {
  int64_t b = 0;
  for (const auto& l : layers) b += (l.k_width + l.v_width) * kv_dtype_size(dtype);
  return b;
}

PagedKvCache::PagedKvCache(std::vector<LayerShape> layers, int32_t num_blocks, int32_t block_size, KvDType dtype)
    : layers_(std::move(layers)), pool_(num_blocks, block_size), dtype_(dtype) {
  const int64_t slots = int64_t{num_blocks} * block_size;
  auto words = [&](int64_t width) { return (slots * width * kv_dtype_size(dtype) + 3) / 4; };
  for (const auto& l : layers_) {
    k_.emplace_back(l.k_width ? new uint32_t[words(l.k_width)] : nullptr);
    v_.emplace_back(l.v_width ? new uint32_t[words(l.v_width)] : nullptr);
  }
}

void* PagedKvCache::rows(std::vector<std::unique_ptr<uint32_t[]>>& a, int layer, KvDType want) {
  if (want != dtype_)
    throw std::logic_error(std::string("the KV cache holds ") + kv_dtype_name(dtype_) + " rows, read as " +
                           kv_dtype_name(want));
  return a[layer].get();
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
