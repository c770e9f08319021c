#pragma once
// The engine-owned KV cache, paged by slot: for each layer, K rows [num_slots, k_width] and V rows
// [num_slots, v_width] in f32 or bf16 (--kv-cache-dtype; bf16 halves the pool's bytes per token),
// where slot = block * block_size + offset and k_width = Hkv * Dqk.
// (Latent attention stores one row [latent | rope key] per slot in K and has no V.) Attention
// reads a sequence's context through its slot list, so a contiguous cache and a paged one look
// the same to it. Blocks are handed out by the BlockPool (reference counts, prefix caching).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/block_pool.h"

namespace fuselm::kv {

struct LayerShape {
  int64_t k_width = 0;  // floats per slot for K (kv heads x q/k head size)
  int64_t v_width = 0;  // floats per slot for V (kv heads x v head size)
};

/// How the cache stores its rows. Attention computes in f32 either way; bf16 rows are rounded to
/// nearest even when written and widened when read.
enum class KvDType : uint8_t { f32, bf16 };

/// "f32" | "bf16" -> KvDType; throws std::invalid_argument naming the value otherwise.
KvDType parse_kv_dtype(const std::string& name);
const char* kv_dtype_name(KvDType d);
/// Bytes of one stored element.
inline int64_t kv_dtype_size(KvDType d) { return d == KvDType::bf16 ? 2 : 4; }

/// Bytes of KV per token over all `layers`, stored as `dtype`.
int64_t kv_bytes_per_token(const std::vector<LayerShape>& layers, KvDType dtype = KvDType::f32);

class PagedKvCache {
 public:
  /// Allocates num_blocks * block_size slots for every layer (pages are touched lazily by the
  /// OS, so an unused pool costs address space, not memory). Throws std::bad_alloc.
  PagedKvCache(std::vector<LayerShape> layers, int32_t num_blocks, int32_t block_size, KvDType dtype = KvDType::f32);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const LayerShape& layer_shape(int layer) const { return layers_.at(layer); }
  KvDType dtype() const { return dtype_; }
  /// f32 rows of a layer (an f32 cache; throws std::logic_error for a bf16 one).
  float* k(int layer) { return static_cast<float*>(rows(k_, layer, KvDType::f32)); }
  float* v(int layer) { return static_cast<float*>(rows(v_, layer, KvDType::f32)); }
  /// bf16 rows of a layer (a bf16 cache; throws std::logic_error for an f32 one).
  uint16_t* k_bf16(int layer) { return static_cast<uint16_t*>(rows(k_, layer, KvDType::bf16)); }
  uint16_t* v_bf16(int layer) { return static_cast<uint16_t*>(rows(v_, layer, KvDType::bf16)); }
  int32_t block_size() const { return pool_.block_size(); }
  int64_t num_slots() const { return int64_t{pool_.num_blocks()} * pool_.block_size(); }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  /// Bytes of KV per token over all layers.
  int64_t bytes_per_token() const { return kv_bytes_per_token(layers_, dtype_); }

 private:
  void* rows(std::vector<std::unique_ptr<uint32_t[]>>& a, int layer, KvDType want);
  std::vector<LayerShape> layers_;
  BlockPool pool_;
  KvDType dtype_;
  std::vector<std::unique_ptr<uint32_t[]>> k_, v_;  // 4-byte aligned storage of either dtype
};

/// One sequence's KV blocks and the slot of each of its positions, released by hand (tests and
/// benches; the engine uses the RAII SequenceHandle).
class SequenceKv {
 public:
  /// Makes room for `length` positions; false (nothing changed) when blocks run out.
  bool reserve(int64_t length, PagedKvCache& cache);
  /// Returns every block to the pool.
  void release(PagedKvCache& cache);
  const int32_t* slots() const { return slots_.data(); }
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

 private:
  std::vector<int32_t> blocks_;
  std::vector<int32_t> slots_;
};

}  // namespace fuselm::kv
