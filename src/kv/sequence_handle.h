#pragma once
// A sequence's claim on the KV pool: its block table and the slot of each position. The handle
// returns every block when it is destroyed (also when a forward throws or a request is aborted),
// and it is how a sequence uses and feeds the prefix cache.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/paged_kv_cache.h"

namespace fuselm::kv {

class SequenceHandle {
 public:
  explicit SequenceHandle(PagedKvCache& cache) : cache_(&cache) {}
  SequenceHandle(SequenceHandle&& o) noexcept;
  SequenceHandle& operator=(SequenceHandle&& o) noexcept;
  SequenceHandle(const SequenceHandle&) = delete;
  SequenceHandle& operator=(const SequenceHandle&) = delete;
  ~SequenceHandle() { release(); }

  /// On an empty handle: takes the cached blocks of the longest run of full blocks at the start
  /// of `tokens`, covering at most `max_tokens` tokens (the caller keeps at least one token to
  /// compute, so it gets logits). Returns the tokens whose KV is now in place (a multiple of the
  /// block size).
  int64_t match_prefix(std::span<const int64_t> tokens, int64_t max_tokens);
  /// Makes room for `length` positions; false (nothing changed) when the pool runs out.
  bool reserve(int64_t length);
  /// Gives back the blocks wholly past the first `length` positions (rows written for tokens that
  /// were then dropped: rejected speculative drafts). Published blocks are kept.
  void truncate(int64_t length);
  /// Publishes to the prefix cache every full block of tokens[0, computed) not yet published;
  /// `tokens` are the sequence's tokens from position 0 and their KV must be written.
  void publish_full_blocks(std::span<const int64_t> tokens, int64_t computed);
  /// Keeps the first `blocks` blocks and returns the others to the pool (a stateful sequence
  /// resumes from a cached prefix only as deep as its state checkpoint: kv/state_pool.h).
  void keep_leading_blocks(size_t blocks);
  /// Returns every block to the pool; the handle is empty afterwards.
  void release();

  const int32_t* slots() const { return slots_.data(); }
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  /// The chained key of each leading full block matched or published so far (block_hash).
  const std::vector<uint64_t>& block_keys() const { return hashes_; }

 private:
  void push_block(int32_t b);
  PagedKvCache* cache_;
  std::vector<int32_t> blocks_;
  std::vector<int32_t> slots_;
  std::vector<uint64_t> hashes_;  // chained key of blocks_[0 .. hashes_.size()), all full
};

}  // namespace fuselm::kv
