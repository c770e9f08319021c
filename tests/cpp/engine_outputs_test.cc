// The engine's output pieces on their own: logit_bias and min_tokens in the Sampler, pooling of
// hidden states, choice seeds, and the batch builder's prompt rows.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/pooling.h"
#include "engine/prompt_logprobs.h"
#include "engine/sampler.h"

namespace fuselm::engine {
namespace engine_outputs_test {

TEST(SamplerBias, LogitBiasMovesTheArgmaxAndKeepsTheModelsLogprob) {
  const std::vector<float> row = {0.f, 3.f, 1.f, 0.5f};
  SamplingParams p;
  p.logit_bias = {{2, 5.f}};
  Sampler s(p);
  const auto t = s.sample(row, true);
  EXPECT_EQ(t.token, 2);
  double z = 0;
  for (float x : row) z += std::exp(x);
  EXPECT_NEAR(t.logprob, 1.0 - std::log(z), 1e-6);  // raw logits, not biased
  p.logit_bias = {{1, -100.f}};
  Sampler banned(p);
  EXPECT_EQ(banned.sample(row, false).token, 2);
}

TEST(SamplerBias, MinTokensMasksTheEndTokensForThatManySamples) {
  const std::vector<float> row = {0.f, 3.f, 1.f, 0.5f};  // greedy: 1
  SamplingParams p;
  p.min_tokens = 2;
  Sampler s(p);
  s.set_end_tokens({1});
  EXPECT_EQ(s.sample(row, false).token, 2);
  EXPECT_EQ(s.sample(row, false).token, 2);
  EXPECT_EQ(s.sample(row, false).token, 1);
}

TEST(SamplerBias, BoundsAreChecked) {
  SamplingParams p;
  p.logit_bias = {{1, 100.5f}};
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
  p.logit_bias = {{-1, 1.f}};
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
  p.logit_bias = {};
  p.min_tokens = -1;
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
}

TEST(Pooling, MeanLastAndClsNormalised) {
  const std::vector<std::vector<float>> rows = {{3.f, 0.f}, {0.f, 4.f}, {1.f, 1.f}};
  PoolState mean(Pooling::mean, 3, false), last(Pooling::last, 3, true), cls(Pooling::cls, 3, true);
  for (int64_t p : {2, 0, 1})  // any order of chunks
    for (auto* s : {&mean, &last, &cls}) s->add(p, rows[p]);
  EXPECT_EQ(mean.result(), (std::vector<float>{4.f / 3, 5.f / 3}));
  EXPECT_NEAR(last.result()[0], std::sqrt(0.5), 1e-7);
  EXPECT_EQ(cls.result(), (std::vector<float>{1.f, 0.f}));
  EXPECT_EQ(parse_pooling("lasttoken"), Pooling::last);
  EXPECT_FALSE(parse_pooling("max").has_value());
}

TEST(ChoiceSeed, ChoiceZeroKeepsTheSeedAndTheOthersDiffer) {
  EXPECT_EQ(choice_seed(42, 0), 42u);
  EXPECT_NE(choice_seed(42, 1), choice_seed(42, 2));
  EXPECT_NE(choice_seed(42, 1), 42u);
  EXPECT_EQ(choice_seed(42, 3), choice_seed(42, 3));
}

TEST(PromptLogprob, LogSoftmaxWithRankedAlternatives) {
  const std::vector<float> row = {1.f, 2.f, 2.f, 0.f};
  const auto t = prompt_token_logprob(row, 3, 3);
  double z = 0;
  for (float x : row) z += std::exp(x);
  EXPECT_NEAR(t.logprob, -std::log(z), 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);  // ties by lower id
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 0);
}

TEST(BatchBuilder, PromptRowsOfSequencesThatReadThem) {
  kv::PagedKvCache cache({kv::LayerShape{1, 0}}, 16, 4);
  Request r;
  r.prompt_ids = {5, 6, 7, 8, 9};
  r.prompt_logprobs = true;
  auto s = std::make_unique<Sequence>(r);
  s->tokens = s->req.prompt_ids;
  s->num_prompt = 5;
  s->kv.emplace(cache);
  ASSERT_TRUE(s->kv->reserve(5));
  BatchBuilder bb;
  std::vector<ScheduledSeq> chunk = {{s.get(), 3}};  // positions 0..2: prompt rows only
  bb.build(chunk);
  ASSERT_EQ(bb.uses().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(bb.uses()[i].position, static_cast<int64_t>(i));
    EXPECT_FALSE(bb.uses()[i].sample);
  }
  s->computed = 3;
  std::vector<ScheduledSeq> rest = {{s.get(), 2}};  // positions 3, 4: a prompt row, then the sampled one
  bb.build(rest);
  ASSERT_EQ(bb.uses().size(), 2u);
  EXPECT_FALSE(bb.uses()[0].sample);
  EXPECT_EQ(bb.uses()[1].position, 4);
  EXPECT_TRUE(bb.uses()[1].sample);
  EXPECT_EQ(std::vector<int64_t>(bb.logit_rows().begin(), bb.logit_rows().end()), (std::vector<int64_t>{0, 1}));
}

}  // namespace engine_outputs_test
}  // namespace fuselm::engine
