#pragma once
// The KV block pool: a fixed number of fixed-size blocks, reference counted, with automatic
// prefix caching as vLLM has it. A block that is full holds the KV of block_size tokens; its key
// is a hash of those tokens chained with the key of the block before it, so equal keys mean an
// equal prefix. Blocks nobody references but that hold a cached prefix stay findable until they
// are evicted, least recently released first, when a fresh block is needed.
// Not thread-safe: the engine thread owns it.
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace fuselm::kv {

/// Key of a full block: its tokens hashed together with `parent` (the previous block's key, or
/// 0 for the first block).
uint64_t block_hash(uint64_t parent, std::span<const int64_t> tokens);

/// Counters for metrics; blocks are used (referenced), cached (unreferenced, holding a prefix)
/// or free.
struct PoolStats {
  int32_t num_blocks = 0, used = 0, cached = 0, free = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // in blocks looked up / found
  int64_t evictions = 0;
};

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size);

  /// A block with reference count 1 and no key: a never-used one, else the least recently
  /// released cached block (its key is forgotten). -1 when every block is referenced.
  int32_t allocate();
  /// The cached block holding key `hash` with exactly `tokens`, its reference count raised
  /// (taken out of the eviction order if it was 0); -1 on a miss. Counts a query and a hit.
  int32_t acquire_cached(uint64_t hash, std::span<const int64_t> tokens);
  /// Publishes a full, written block under `hash`. A key already held by another block is left
  /// to that block (this one stays uncached and goes back to the free list when released).
  void publish(int32_t block, uint64_t hash, std::span<const int64_t> tokens);
  /// Drops one reference; at 0 a cached block joins the eviction order, any other is freed.
  void release(int32_t block);
  /// Called with the key of every cached block allocate() evicts (the state checkpoints kept
  /// under that key go with it: kv/state_pool.h).
  void set_evict_listener(std::function<void(uint64_t hash)> f) { on_evict_ = std::move(f); }

  int32_t ref_count(int32_t block) const { return blocks_.at(block).refs; }
  bool is_cached(int32_t block) const { return blocks_.at(block).cached; }
  /// Blocks allocate() could hand out now (free plus evictable cached ones).
  int32_t num_available() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  PoolStats stats() const;

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::vector<int64_t> tokens;  // of a cached block: checked on a hit, so a hash collision misses
    std::list<int32_t>::iterator lru_pos;
    bool in_lru = false;
  };
  void forget(int32_t block);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // unreferenced cached blocks, least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t queries_ = 0, hits_ = 0, evictions_ = 0;
  std::function<void(uint64_t)> on_evict_;
};

}  // namespace fuselm::kv
