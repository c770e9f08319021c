// HeadSection: the per-rank sizes a packed or stacked projection's sections take under tensor
// parallelism (docs/fusers.md), against sizes worked out by hand from the head counts.
#include <gtest/gtest.h>

#include "fusers/fuser.h"

namespace fuselm::fusers {
namespace fusers_sections_test {

TEST(HeadSection, SplitsHeadsEvenly) {
  const HeadSection q{"q", 32, 128, false};
  EXPECT_EQ(q.size(), 4096);
  EXPECT_EQ(q.per_rank(1), 4096);
  EXPECT_EQ(q.per_rank(4), 1024);
  EXPECT_EQ(q.per_rank(32), 128);
  EXPECT_EQ(q.per_rank(3), std::nullopt);   // 32 heads do not divide among 3 ranks
  EXPECT_EQ(q.per_rank(64), std::nullopt);  // q heads are never replicated
  EXPECT_EQ(q.per_rank(0), std::nullopt);
  EXPECT_EQ(q.expr(), "32/tp*128");
}

TEST(HeadSection, ReplicatesFewKvHeads) {
  const HeadSection mqa{"k", 1, 64, true};  // GPTBigCode multi_query: one KV head
  EXPECT_EQ(mqa.per_rank(1), 64);
  EXPECT_EQ(mqa.per_rank(8), 64);
  EXPECT_EQ(mqa.expr(), "64");
  const HeadSection gqa{"v", 2, 16, true};
  EXPECT_EQ(gqa.per_rank(2), 16);
  EXPECT_EQ(gqa.per_rank(4), 16);            // each of the 2 heads on 2 ranks
  EXPECT_EQ(gqa.per_rank(3), std::nullopt);  // 3 ranks cannot share 2 heads evenly
  EXPECT_EQ(gqa.expr(), "max(1,2/tp)*16");
}

}  // namespace fusers_sections_test
}  // namespace fuselm::fusers
