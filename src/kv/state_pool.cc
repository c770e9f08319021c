#include "kv/state_pool.h"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace fuselm::kv {

StatePool::StatePool(std::vector<int64_t> floats_per_state, int32_t seq_slots, int32_t checkpoint_slots)
    : cache_(std::move(floats_per_state), seq_slots + std::max(0, checkpoint_slots)),
      seq_slots_(seq_slots),
      checkpoint_slots_(std::max(0, checkpoint_slots)),
      seq_held_(static_cast<size_t>(cache_.num_slots()), false) {
  for (int32_t s = cache_.num_slots() - 1; s >= 0; --s) free_.push_back(s);
}

int32_t StatePool::allocate() {
  if (seq_used_ >= seq_slots_) return -1;
  // seq_used < seq_slots and checkpoints <= checkpoint_slots: a free slot exists.
  const int32_t s = free_.back();
  free_.pop_back();
  seq_held_[s] = true;
  ++seq_used_;
  return s;
}

void StatePool::release(int32_t slot) {
  if (slot < 0 || slot >= cache_.num_slots() || !seq_held_[slot])
    throw std::logic_error(fmt::format("state slot {} released but not held", slot));
  seq_held_[slot] = false;
  --seq_used_;
  free_.push_back(slot);
}

void StatePool::store(uint64_t key, int32_t from) {
  if (checkpoint_slots_ == 0) return;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    return;
  }
  int32_t slot = -1;
  if (static_cast<int32_t>(by_key_.size()) >= checkpoint_slots_) {
    const uint64_t old = lru_.front();
    slot = by_key_.at(old).slot;
    by_key_.erase(old);
    lru_.pop_front();
    ++evictions_;
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  cache_.copy(from, slot);
  by_key_.emplace(key, Checkpoint{slot, lru_.insert(lru_.end(), key)});
  ++stores_;
}

int64_t StatePool::restore_deepest(const std::vector<uint64_t>& keys, int64_t limit, int32_t to) {
  for (int64_t i = std::min<int64_t>(limit, static_cast<int64_t>(keys.size())) - 1; i >= 0; --i) {
    auto it = by_key_.find(keys[static_cast<size_t>(i)]);
    if (it == by_key_.end()) continue;
    cache_.copy(it->second.slot, to);
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    ++hits_;
    return i + 1;
  }
  return 0;
}

void StatePool::drop(uint64_t key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  free_.push_back(it->second.slot);
  lru_.erase(it->second.lru_pos);
  by_key_.erase(it);
}

StateStats StatePool::stats() const {
  StateStats s;
  s.seq_slots = seq_slots_;
  s.seq_used = seq_used_;
  s.checkpoint_slots = checkpoint_slots_;
  s.checkpoints = static_cast<int32_t>(by_key_.size());
  s.bytes_per_slot = cache_.bytes_per_slot();
  s.checkpoint_stores = stores_;
  s.checkpoint_hits = hits_;
  s.checkpoint_evictions = evictions_;
  return s;
}

std::vector<int64_t> checkpoint_positions(int64_t num_prompt, int32_t block_size, int count) {
  std::vector<int64_t> out;
  if (block_size <= 0 || num_prompt <= 1) return out;
  const int64_t deepest = (num_prompt - 1) / block_size * block_size;
  for (int64_t step = block_size; deepest > 0 && static_cast<int>(out.size()) < count; step *= 2) {
    const int64_t p = deepest / step * step;
    if (p == 0) break;
    if (out.empty() || out.back() != p) out.push_back(p);
    if (step > deepest) break;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace fuselm::kv
