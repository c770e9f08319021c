// Sampler: greedy is the argmax; seeded sampling is reproducible; top-k and top-p restrict the
// support to the k most likely tokens and to the smallest nucleus reaching top_p; logprobs are
// log-softmax of the raw logits (checked against a direct computation).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "engine/sampler.h"

using fuselm::engine::Sampler;
using fuselm::engine::SamplingParams;

namespace sampler_test {
std::vector<float> logits_of(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithLogprob) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.9f};
  Sampler s(SamplingParams{});
  auto r = s.sample(l);
  EXPECT_EQ(r.token, 1);
  double z = 0;
  for (float x : l) z += std::exp(x);
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-6);
}

TEST(Sampler, SeededSamplingIsReproducibleAndSeedsDiffer) {
  auto l = logits_of({0.25, 0.25, 0.25, 0.25});
  SamplingParams p{1.0f, 0, 1.0f, 42};
  Sampler a(p), b(p);
  std::vector<int64_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(l).token);
    tb.push_back(b.sample(l).token);
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int64_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(l).token);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  auto l = logits_of({0.4, 0.3, 0.2, 0.1});
  Sampler s(SamplingParams{1.0f, 2, 1.0f, 7});
  std::set<int64_t> seen;
  for (int i = 0; i < 400; ++i) seen.insert(s.sample(l).token);
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  auto l = logits_of({0.5, 0.3, 0.15, 0.05});
  Sampler s(SamplingParams{1.0f, 0, 0.75f, 7});  // 0.5 + 0.3 reaches 0.75
  std::set<int64_t> seen;
  for (int i = 0; i < 400; ++i) seen.insert(s.sample(l).token);
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  auto l = logits_of({0.7, 0.2, 0.1});
  Sampler s(SamplingParams{1.0f, 0, 1.0f, 1});
  std::vector<int> counts(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(l).token];
  EXPECT_NEAR(counts[0] / double(n), 0.7, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.1, 0.02);
}

TEST(Sampler, LowTemperatureConcentratesOnTheArgmax) {
  auto l = logits_of({0.4, 0.35, 0.25});
  Sampler s(SamplingParams{0.01f, 0, 1.0f, 3});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l).token, 0);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(SamplingParams{-1.0f, 0, 1.0f, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, -2, 1.0f, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 0.0f, 0}), std::invalid_argument);
}

TEST(SamplingParams, OneSetOfBoundsTheServerAndTheCliShare) {
  // OpenAI's: temperature [0, 2] (generate once took up to 100), top_p (0, 1].
  EXPECT_NO_THROW(validate(SamplingParams{2.0f, 0, 1.0f, 0}));
  EXPECT_THROW(validate(SamplingParams{2.5f, 0, 1.0f, 0}), std::invalid_argument);
  EXPECT_THROW(validate(SamplingParams{std::nanf(""), 0, 1.0f, 0}), std::invalid_argument);
  try {
    validate(SamplingParams{1.0f, 0, 0.0f, 0});
    FAIL() << "top_p 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "top_p must be in (0, 1], got 0");
  }
  SamplingParams lp;
  lp.top_logprobs = 21;
  EXPECT_THROW(validate(lp), std::invalid_argument);
  EXPECT_EQ(fuselm::engine::sampling_range::temperature.interval(), "[0, 2]");
  EXPECT_EQ(fuselm::engine::seed_from_int(-1), ~uint64_t{0});  // every int64 is a seed; negatives wrap as the server reads them
}

}  // namespace sampler_test
