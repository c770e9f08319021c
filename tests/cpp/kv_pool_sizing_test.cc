// The default KV pool: max_seqs full contexts, capped by a share of free memory and an absolute
// cap, raised to one full context when memory allows; explicit bytes and tokens win.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kv/pool_sizing.h"

namespace fuselm::kv {
namespace kv_pool_sizing_test {

constexpr int64_t GiB = int64_t{1} << 30;

TEST(KvPoolSizing, DefaultIsMaxSeqsContextsWhenSmall) {
  // 4 sequences × 2048 tokens × 1 KiB = 8 MiB: far under every cap.
  EXPECT_EQ(default_pool_tokens(4, 2048, 1024, 16 * GiB, 16), 4 * 2048);
}

TEST(KvPoolSizing, DefaultIsCappedByAShareOfFreeMemory) {
  // 64 × 8192 tokens × 46080 B = 24 GB wanted; a fifth of 10 GiB is 2 GiB.
  const int64_t per_token = 46080;
  const int64_t t = default_pool_tokens(64, 8192, per_token, 10 * GiB, 16);
  EXPECT_EQ(t, static_cast<int64_t>(kDefaultShareOfFree * 10 * GiB) / per_token);
  EXPECT_LE(t * per_token, 2 * GiB + per_token);
}

TEST(KvPoolSizing, DefaultNeverPassesTheAbsoluteCap) {
  const int64_t per_token = 46080;
  EXPECT_EQ(default_pool_tokens(64, 8192, per_token, 200 * GiB, 16), kDefaultMaxBytes / per_token);
  EXPECT_EQ(default_pool_tokens(64, 8192, per_token, 0, 16), kDefaultMaxBytes / per_token);  // unknown free memory
}

TEST(KvPoolSizing, DefaultHoldsOneFullContextWhenMemoryAllows) {
  // A fifth of 1 GiB holds 4660 tokens of 46080 B; one 8192-token context (377 MB) fits in half of it.
  EXPECT_EQ(default_pool_tokens(64, 8192, 46080, GiB, 16), 8192);
  // With 300 MB free a full context would be more than half: the share cap stays.
  const int64_t avail = 300'000'000;
  EXPECT_EQ(default_pool_tokens(64, 8192, 46080, avail, 16), static_cast<int64_t>(kDefaultShareOfFree * avail) / 46080);
}

TEST(KvPoolSizing, ExplicitSizesWin) {
  EXPECT_EQ(pool_blocks(PoolSizing{0, 100, 64}, 1024, 8192, 16), 7);       // tokens, rounded up to blocks
  EXPECT_EQ(pool_blocks(PoolSizing{1 << 20, 0, 64}, 1024, 8192, 16), 64);  // 1 MiB of 16 KiB blocks
  EXPECT_THROW(pool_blocks(PoolSizing{1000, 0, 1}, 1024, 8192, 16), std::invalid_argument);
}

}  // namespace kv_pool_sizing_test
}  // namespace fuselm::kv
