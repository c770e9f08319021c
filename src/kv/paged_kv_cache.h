#pragma once
// The engine-owned KV cache, paged by slot: for each layer, K rows [num_slots, k_width] and V rows
// [num_slots, v_width] in f32, bf16 or q8_0 (--kv-cache-dtype; bf16 halves the pool's bytes per
// token, q8_0 stores 34 bytes per 32 values), where slot = block * block_size + offset and
// k_width = Hkv * Dqk. A q8_0 row is, per head, ceil(head size / 32) blocks of ggml's block_q8_0
// (fp16 scale, 32 int8), the head padded with zeros to whole blocks.
// (Latent attention stores one row [latent | rope key] per slot in K and has no V; in q8_0 the
// latent and the rope key are each padded to whole blocks: 512 + 64 values take 16 + 2 blocks,
// 612 bytes, where bf16 takes 1152.) Attention
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
  // Head sizes within the rows (q8_0 pads each head to whole blocks); 0: unknown, which a q8_0
  // cache refuses. For a latent row k_head is the latent's width (the rest of the row is the rope key).
  int64_t k_head = 0, v_head = 0;
  // A latent (MLA) row [latent (k_head) | rope key (k_width - k_head)] in K, no V: its two parts
  // are not heads of one size, and q8_0 pads each to whole blocks (kv_latent_row_bytes).
  bool latent = false;
};

/// How the cache stores its rows. Attention computes in f32 either way; bf16 rows are rounded to
/// nearest even when written and widened when read; q8_0 rows are quantized per 32-block when
/// written (ggml's quantize_row_q8_0_ref) and read block by block (scale x int8).
enum class KvDType : uint8_t { f32, bf16, q8_0 };

/// Values per q8_0 block and bytes per block (fp16 scale + 32 int8), as ggml's block_q8_0.
inline constexpr int64_t kKvQ8Block = 32;
inline constexpr int64_t kKvQ8BlockBytes = 34;
/// q8_0 blocks of one head of `head` values (padded to whole blocks).
inline int64_t kv_q8_blocks(int64_t head) { return (head + kKvQ8Block - 1) / kKvQ8Block; }

/// "f32" | "bf16" | "q8_0" -> KvDType; throws std::invalid_argument naming the value otherwise.
KvDType parse_kv_dtype(const std::string& name);
const char* kv_dtype_name(KvDType d);

/// Bytes of one slot's row of `width` values in heads of `head` values, stored as `dtype`.
/// Throws std::invalid_argument for q8_0 with an unknown head size (head 0, or not dividing width).
int64_t kv_row_bytes(int64_t width, int64_t head, KvDType dtype);

/// Bytes of one slot's latent row of `width` values, the first `latent` of them the latent and the
/// rest the rope key: in q8_0 kv_q8_blocks(latent) + kv_q8_blocks(width - latent) blocks (each part
/// padded with zeros), else width values. Throws std::invalid_argument unless 0 < latent <= width.
int64_t kv_latent_row_bytes(int64_t width, int64_t latent, KvDType dtype);

/// Bytes of one slot's K row (v: its V row) of layer `l` as `dtype`: kv_latent_row_bytes for a
/// latent layer's K (its V is empty), kv_row_bytes otherwise; throws as they do.
int64_t kv_layer_row_bytes(const LayerShape& l, bool v, KvDType dtype);

/// Bytes of KV per token over all `layers`, stored as `dtype`. Throws as kv_row_bytes, naming
/// the layer.
int64_t kv_bytes_per_token(const std::vector<LayerShape>& layers, KvDType dtype = KvDType::f32);

class PagedKvCache {
 public:
  /// Allocates num_blocks * block_size slots for every layer (pages are touched lazily by the
  /// OS, so an unused pool costs address space, not memory). Throws std::bad_alloc.
  /// Throws std::invalid_argument as kv_bytes_per_token (a q8_0 cache of rows without head sizes).
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
  /// q8_0 rows of a layer: per slot, k_width / k_head heads of kv_q8_blocks(k_head) blocks of
  /// kKvQ8BlockBytes bytes, or a latent row's blocks (kv_latent_row_bytes) (a q8_0 cache; throws
  /// std::logic_error otherwise).
  void* k_q8_0(int layer) { return rows(k_, layer, KvDType::q8_0); }
  void* v_q8_0(int layer) { return rows(v_, layer, KvDType::q8_0); }
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
