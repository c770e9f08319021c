// The KV block pool and sequence handles: reference counts, prefix-cache hits, LRU eviction, and
// blocks returned by RAII (also when an exception unwinds).
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "kv/block_pool.h"
#include "kv/sequence_handle.h"

namespace fuselm::kv {
namespace kv_block_pool_test {

std::vector<int64_t> iota_tokens(int64_t n, int64_t start = 100) {
  std::vector<int64_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

PagedKvCache small_cache(int32_t blocks, int32_t bs = 4) { return PagedKvCache({LayerShape{2, 2}}, blocks, bs); }

TEST(BlockPool, AllocatesEveryBlockOnceThenRefuses) {
  BlockPool pool(3, 4);
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(pool.allocate());
  EXPECT_EQ(pool.allocate(), -1);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.stats().used, 3);
  pool.release(got[1]);
  EXPECT_EQ(pool.allocate(), got[1]);
  EXPECT_THROW({ pool.release(got[0]); pool.release(got[0]); }, std::logic_error);
}

TEST(BlockPool, HashChainsThePrefix) {
  auto a = iota_tokens(4), b = iota_tokens(4, 200);
  EXPECT_EQ(block_hash(0, a), block_hash(0, a));
  EXPECT_NE(block_hash(0, a), block_hash(0, b));
  EXPECT_NE(block_hash(block_hash(0, a), b), block_hash(block_hash(0, b), b));  // same block, other prefix
}

TEST(SequenceHandle, PrefixHitSharesBlocksAndCountsReferences) {
  auto cache = small_cache(8);
  auto prompt = iota_tokens(10);  // two full blocks of 4 and 2 tokens
  SequenceHandle a(cache);
  EXPECT_EQ(a.match_prefix(prompt, 9), 0);
  ASSERT_TRUE(a.reserve(10));
  a.publish_full_blocks(prompt, 10);
  SequenceHandle b(cache);
  EXPECT_EQ(b.match_prefix(prompt, 9), 8);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_EQ(cache.pool().ref_count(a.blocks()[0]), 2);
  ASSERT_TRUE(b.reserve(11));
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);  // the partial block is never shared
  const auto s = cache.pool().stats();
  EXPECT_EQ(s.prefix_hits, 2);
  EXPECT_EQ(s.prefix_queries, 3);  // a: 2 misses stop at the first; b: 2 hits + nothing past max
  EXPECT_EQ(s.used, 4);
  // A different second block matches only the first.
  auto other = prompt;
  other[5] = 7;
  SequenceHandle c(cache);
  EXPECT_EQ(c.match_prefix(other, 9), 4);
  // max_tokens keeps the last token to compute.
  SequenceHandle d(cache);
  EXPECT_EQ(d.match_prefix(std::span<const int64_t>(prompt).first(8), 7), 4);
}

TEST(SequenceHandle, ReleasedCachedBlocksStayFindableUntilEvictedLeastRecentFirst) {
  auto cache = small_cache(4);
  auto p1 = iota_tokens(8, 100), p2 = iota_tokens(8, 500);
  {
    SequenceHandle a(cache);
    ASSERT_TRUE(a.reserve(8));
    a.publish_full_blocks(p1, 8);
  }
  {
    SequenceHandle b(cache);
    ASSERT_TRUE(b.reserve(8));
    b.publish_full_blocks(p2, 8);
  }
  auto s = cache.pool().stats();
  EXPECT_EQ(s.cached, 4);
  EXPECT_EQ(s.free, 0);
  EXPECT_EQ(cache.pool().num_available(), 4);
  {
    SequenceHandle c(cache);
    EXPECT_EQ(c.match_prefix(p1, 8), 8);  // p1 is now the most recently used
  }
  {
    // Two fresh blocks evict p2's (released before p1's re-release), deepest block first.
    SequenceHandle d(cache);
    ASSERT_TRUE(d.reserve(8));
    EXPECT_EQ(cache.pool().stats().evictions, 2);
  }
  SequenceHandle e(cache);
  EXPECT_EQ(e.match_prefix(p1, 8), 8);
  e.release();
  SequenceHandle f(cache);
  EXPECT_EQ(f.match_prefix(p2, 8), 0);
}

TEST(SequenceHandle, FailedReserveChangesNothing) {
  auto cache = small_cache(3);
  SequenceHandle a(cache);
  ASSERT_TRUE(a.reserve(5));
  EXPECT_FALSE(a.reserve(13));
  EXPECT_EQ(a.capacity(), 8);
  EXPECT_EQ(cache.pool().stats().used, 2);
  EXPECT_TRUE(a.reserve(12));
}

TEST(SequenceHandle, ReturnsBlocksWhenAnExceptionUnwinds) {
  auto cache = small_cache(4);
  auto prompt = iota_tokens(8);
  try {
    SequenceHandle a(cache);
    ASSERT_TRUE(a.reserve(16));
    a.publish_full_blocks(prompt, 8);
    throw std::runtime_error("forward failed");
  } catch (const std::runtime_error&) {
  }
  const auto s = cache.pool().stats();
  EXPECT_EQ(s.used, 0);
  EXPECT_EQ(s.cached, 2);
  EXPECT_EQ(s.free, 2);
  SequenceHandle moved(cache);
  {
    SequenceHandle tmp(cache);
    ASSERT_TRUE(tmp.reserve(4));
    moved = std::move(tmp);
  }
  EXPECT_EQ(cache.pool().stats().used, 1);
}

}  // namespace kv_block_pool_test
}  // namespace fuselm::kv
