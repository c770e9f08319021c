#include "kv/block_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fuselm::kv {

uint64_t block_hash(uint64_t parent, std::span<const int64_t> tokens) {
  // splitmix64 finalizer over the chain; 0 is reserved for "no parent".
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent ^ 0x5851f42d4c957f2dull);
  for (int64_t t : tokens) h = mix(h ^ static_cast<uint64_t>(t));
  return h == 0 ? 1 : h;
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size) : block_size_(block_size), blocks_(num_blocks) {
  if (num_blocks <= 0 || block_size <= 0)
    throw std::invalid_argument("KV pool: blocks and block size must be positive, got " + std::to_string(num_blocks) +
                                " blocks of " + std::to_string(block_size));
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::forget(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.cached) {
    auto it = by_hash_.find(blk.hash);
    if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  }
  blk.cached = false;
  blk.tokens.clear();
}

int32_t BlockPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    blocks_[b].in_lru = false;
    const bool keyed = blocks_[b].cached;
    const uint64_t hash = blocks_[b].hash;
    forget(b);
    ++evictions_;
    if (keyed && on_evict_) on_evict_(hash);
  } else {
    return -1;
  }
  blocks_[b].refs = 1;
  return b;
}

int32_t BlockPool::acquire_cached(uint64_t hash, std::span<const int64_t> tokens) {
  ++queries_;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  Block& blk = blocks_[it->second];
  if (!std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end())) return -1;
  if (blk.in_lru) {
    lru_.erase(blk.lru_pos);
    blk.in_lru = false;
  }
  ++blk.refs;
  ++hits_;
  return it->second;
}

void BlockPool::publish(int32_t b, uint64_t hash, std::span<const int64_t> tokens) {
  Block& blk = blocks_.at(b);
  if (blk.cached || by_hash_.contains(hash)) return;
  blk.cached = true;
  blk.hash = hash;
  blk.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, b);
}

void BlockPool::release(int32_t b) {
  Block& blk = blocks_.at(b);
  if (blk.refs <= 0) throw std::logic_error("KV pool: block " + std::to_string(b) + " released more often than taken");
  if (--blk.refs > 0) return;
  if (blk.cached) {
    blk.lru_pos = lru_.insert(lru_.end(), b);
    blk.in_lru = true;
  } else {
    free_.push_back(b);
  }
}

PoolStats BlockPool::stats() const {
  PoolStats s;
  s.num_blocks = num_blocks();
  s.cached = static_cast<int32_t>(lru_.size());
  s.free = static_cast<int32_t>(free_.size());
  s.used = s.num_blocks - s.cached - s.free;
  s.prefix_queries = queries_;
  s.prefix_hits = hits_;
  s.evictions = evictions_;
  return s;
}

}  // namespace fuselm::kv
