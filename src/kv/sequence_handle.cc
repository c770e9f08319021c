#include "kv/sequence_handle.h"

#include <algorithm>
#include <utility>

namespace fuselm::kv {

SequenceHandle::SequenceHandle(SequenceHandle&& o) noexcept
    : cache_(o.cache_), blocks_(std::move(o.blocks_)), slots_(std::move(o.slots_)), hashes_(std::move(o.hashes_)) {
  o.blocks_.clear();
  o.slots_.clear();
  o.hashes_.clear();
}

SequenceHandle& SequenceHandle::operator=(SequenceHandle&& o) noexcept {
  if (this != &o) {
    release();
    cache_ = o.cache_;
    blocks_ = std::move(o.blocks_);
    slots_ = std::move(o.slots_);
    hashes_ = std::move(o.hashes_);
    o.blocks_.clear();
    o.slots_.clear();
    o.hashes_.clear();
  }
  return *this;
}

void SequenceHandle::push_block(int32_t b) {
  const int32_t bs = cache_->block_size();
  blocks_.push_back(b);
  for (int32_t o = 0; o < bs; ++o) slots_.push_back(b * bs + o);
}

int64_t SequenceHandle::match_prefix(std::span<const int64_t> tokens, int64_t max_tokens) {
  if (!blocks_.empty()) return 0;
  const int64_t bs = cache_->block_size();
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  uint64_t parent = 0;
  for (int64_t start = 0; start + bs <= limit; start += bs) {
    auto chunk = tokens.subspan(start, bs);
    const uint64_t h = block_hash(parent, chunk);
    const int32_t b = cache_->pool().acquire_cached(h, chunk);
    if (b < 0) break;
    push_block(b);
    hashes_.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(blocks_.size()) * bs;
}

bool SequenceHandle::reserve(int64_t length) {
  const int32_t bs = cache_->block_size();
  const int64_t need = (length + bs - 1) / bs;
  const size_t had = blocks_.size();
  while (static_cast<int64_t>(blocks_.size()) < need) {
    const int32_t b = cache_->pool().allocate();
    if (b < 0) {
      while (blocks_.size() > had) {
        cache_->pool().release(blocks_.back());
        blocks_.pop_back();
      }
      slots_.resize(had * bs);
      return false;
    }
    push_block(b);
  }
  return true;
}

void SequenceHandle::truncate(int64_t length) {
  const int64_t bs = cache_->block_size();
  const size_t keep = std::max(static_cast<size_t>((std::max<int64_t>(length, 0) + bs - 1) / bs), hashes_.size());
  while (blocks_.size() > keep) {
    cache_->pool().release(blocks_.back());
    blocks_.pop_back();
  }
  slots_.resize(blocks_.size() * static_cast<size_t>(bs));
}

void SequenceHandle::publish_full_blocks(std::span<const int64_t> tokens, int64_t computed) {
  const int64_t bs = cache_->block_size();
  computed = std::min<int64_t>(computed, static_cast<int64_t>(tokens.size()));
  while (static_cast<int64_t>(hashes_.size()) < static_cast<int64_t>(blocks_.size()) &&
         static_cast<int64_t>(hashes_.size() + 1) * bs <= computed) {
    const size_t i = hashes_.size();
    auto chunk = tokens.subspan(i * bs, bs);
    const uint64_t h = block_hash(i == 0 ? 0 : hashes_.back(), chunk);
    cache_->pool().publish(blocks_[i], h, chunk);
    hashes_.push_back(h);
  }
}

void SequenceHandle::keep_leading_blocks(size_t blocks) {
  while (blocks_.size() > blocks) {
    cache_->pool().release(blocks_.back());
    blocks_.pop_back();
  }
  if (hashes_.size() > blocks) hashes_.resize(blocks);
  slots_.resize(blocks * static_cast<size_t>(cache_->block_size()));
}

void SequenceHandle::release() {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) cache_->pool().release(*it);
  blocks_.clear();
  slots_.clear();
  hashes_.clear();
}

}  // namespace fuselm::kv
