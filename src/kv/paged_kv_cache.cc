#include "kv/paged_kv_cache.h"

#include <stdexcept>
#include <string>

namespace fuselm::kv {

KvDType parse_kv_dtype(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "auto") return KvDType::f32;
  if (name == "bf16" || name == "bfloat16") return KvDType::bf16;
  if (name == "q8_0") return KvDType::q8_0;
  throw std::invalid_argument("--kv-cache-dtype: '" + name + "' is not a KV cache dtype (f32, bf16 or q8_0)");
}

const char* kv_dtype_name(KvDType d) {
  switch (d) {
    case KvDType::bf16: return "bf16";
    case KvDType::q8_0: return "q8_0";
    default: return "f32";
  }
}

int64_t kv_row_bytes(int64_t width, int64_t head, KvDType dtype) {
  if (width == 0) return 0;
  if (dtype == KvDType::f32) return width * 4;
  if (dtype == KvDType::bf16) return width * 2;
  if (head <= 0 || width % head != 0)
    throw std::invalid_argument("--kv-cache-dtype q8_0: a KV row of " + std::to_string(width) +
                                " values has no head size dividing it (" + std::to_string(head) +
                                "); use --kv-cache-dtype bf16 or f32");
  return width / head * kv_q8_blocks(head) * kKvQ8BlockBytes;
}

int64_t kv_latent_row_bytes(int64_t width, int64_t latent, KvDType dtype) {
  if (latent <= 0 || latent > width)
    throw std::invalid_argument("latent KV row of " + std::to_string(width) + " values with a latent part of " +
                                std::to_string(latent));
  if (dtype != KvDType::q8_0) return kv_row_bytes(width, width, dtype);
  return (kv_q8_blocks(latent) + kv_q8_blocks(width - latent)) * kKvQ8BlockBytes;
}

int64_t kv_layer_row_bytes(const LayerShape& l, bool v, KvDType dtype) {
  if (l.latent) return v ? 0 : kv_latent_row_bytes(l.k_width, l.k_head, dtype);
  return v ? kv_row_bytes(l.v_width, l.v_head, dtype) : kv_row_bytes(l.k_width, l.k_head, dtype);
}

int64_t kv_bytes_per_token(const std::vector<LayerShape>& layers, KvDType dtype) {
  int64_t b = 0;
  for (const auto& l : layers) b += kv_layer_row_bytes(l, false, dtype) + kv_layer_row_bytes(l, true, dtype);
  return b;
}

PagedKvCache::PagedKvCache(std::vector<LayerShape> layers, int32_t num_blocks, int32_t block_size, KvDType dtype)
    : layers_(std::move(layers)), pool_(num_blocks, block_size), dtype_(dtype) {
  const int64_t slots = int64_t{num_blocks} * block_size;
  auto words = [&](const LayerShape& l, bool v) { return (slots * kv_layer_row_bytes(l, v, dtype) + 3) / 4; };
  for (const auto& l : layers_) {
    k_.emplace_back(l.k_width ? new uint32_t[words(l, false)] : nullptr);
    v_.emplace_back(l.v_width ? new uint32_t[words(l, true)] : nullptr);
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
