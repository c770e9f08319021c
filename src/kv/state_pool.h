#pragma once
// Who holds which slot of the StateCache (docs/recurrent.md): running sequences, one slot each, at
// most `seq_slots` at once; and state checkpoints for the prefix cache, at most `checkpoint_slots`.
// A checkpoint is the state of a sequence after the first p tokens of its prompt, p a multiple of
// the KV block size, kept under the chained key of the block that ends at p (kv/block_pool.h): a
// later sequence whose prompt matches those blocks can resume at p from a copy of it instead of
// recomputing the prefix. Checkpoints are evicted least recently used first when a new one needs a
// slot, and dropped with the cached block their key names (BlockPool's eviction listener), so they
// live no longer than the KV they go with. The cache has seq_slots + checkpoint_slots slots, so
// neither kind ever waits for the other. Not thread-safe: the engine thread owns it.
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "kv/state_cache.h"

namespace fuselm::kv {

/// Counters for metrics (slots, not bytes; bytes = slots x bytes_per_slot).
struct StateStats {
  int32_t seq_slots = 0, seq_used = 0;          // running sequences' slots: total, held
  int32_t checkpoint_slots = 0, checkpoints = 0;  // checkpoint slots: total, holding a checkpoint
  int64_t bytes_per_slot = 0;
  int64_t checkpoint_stores = 0, checkpoint_hits = 0, checkpoint_evictions = 0;
};

class StatePool {
 public:
  /// floats_per_state as StateCache; seq_slots > 0; checkpoint_slots >= 0 (0: no checkpoints, a
  /// stateful sequence then never resumes from the prefix cache). Throws as StateCache.
  StatePool(std::vector<int64_t> floats_per_state, int32_t seq_slots, int32_t checkpoint_slots);
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  StateCache& cache() { return cache_; }
  /// A slot for a running sequence, or -1 when seq_slots are all held. Its contents are stale:
  /// the ops start from zeros at position 0, or the caller copies a checkpoint in.
  int32_t allocate();
  /// Gives back a slot from allocate(). Throws std::logic_error for a slot not held.
  void release(int32_t slot);
  int32_t num_free() const { return seq_slots_ - seq_used_; }
  int32_t checkpoint_capacity() const { return checkpoint_slots_; }

  /// Copies the state of sequence slot `from` into a checkpoint under `key` (a block's chained
  /// key), evicting the least recently used checkpoint when all checkpoint slots are taken. A key
  /// already held only becomes the most recently used. No-op without checkpoint slots.
  void store(uint64_t key, int32_t from);
  /// The deepest of `keys` (keys[i]: the chained key of block i, as SequenceHandle::block_keys)
  /// that holds a checkpoint, among keys[0 .. limit): its index + 1 (the blocks it covers), and
  /// its contents copied into sequence slot `to`; 0 (slot untouched) when none does. Counts a hit.
  int64_t restore_deepest(const std::vector<uint64_t>& keys, int64_t limit, int32_t to);
  /// Drops the checkpoint under `key`, if any (its cached block was evicted).
  void drop(uint64_t key);
  bool holds(uint64_t key) const { return by_key_.contains(key); }
  StateStats stats() const;

 private:
  struct Checkpoint {
    int32_t slot = -1;
    std::list<uint64_t>::iterator lru_pos;
  };
  StateCache cache_;
  int32_t seq_slots_ = 0, seq_used_ = 0, checkpoint_slots_ = 0;
  std::vector<int32_t> free_;      // slots held by nobody
  std::vector<bool> seq_held_;     // per slot: held by a sequence
  std::unordered_map<uint64_t, Checkpoint> by_key_;
  std::list<uint64_t> lru_;        // checkpoint keys, least recently used first
  int64_t stores_ = 0, hits_ = 0, evictions_ = 0;
};

/// A running sequence's slot, given back when destroyed (finish, abort, preemption, error).
class StateLease {
 public:
  StateLease(StatePool& pool, int32_t slot) : pool_(&pool), slot_(slot) {}
  StateLease(StateLease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.slot_ = -1; }
  StateLease& operator=(StateLease&&) = delete;
  StateLease(const StateLease&) = delete;
  StateLease& operator=(const StateLease&) = delete;
  ~StateLease() {
    if (slot_ >= 0) pool_->release(slot_);
  }
  int32_t slot() const { return slot_; }

 private:
  StatePool* pool_;
  int32_t slot_;
};

/// Checkpoints kept per sequence at most (checkpoint_positions).
inline constexpr int kCheckpointsPerSequence = 3;

/// Prompt positions where a sequence's state is checkpointed, ascending: d = the deepest multiple
/// of block_size below num_prompt (the most a prompt of the same tokens, or one that extends it,
/// can take from the cache, which always leaves one token to compute), then d rounded down to
/// multiples of 2, 4, ... blocks (shorter shared prefixes, spaced wider the further from the end),
/// at most `count` distinct positions > 0. Empty for a prompt of at most one block.
std::vector<int64_t> checkpoint_positions(int64_t num_prompt, int32_t block_size, int count = kCheckpointsPerSequence);

}  // namespace fuselm::kv
