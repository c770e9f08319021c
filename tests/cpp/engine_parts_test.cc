// The engine's parts on their own: the scheduler's policy (running first, FCFS admission within
// the token budget and max_num_seqs, preemption of the newest), batch assembly (flattened ids,
// positions, slices, sampled rows) and output processing (finish reasons).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/output_processor.h"
#include "engine/scheduler.h"

namespace fuselm::engine {
namespace engine_parts_test {

std::unique_ptr<Sequence> seq(int64_t prompt_len, int64_t max_tokens = 4) {
  Request r;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(i + 1);
  r.max_tokens = max_tokens;
  auto s = std::make_unique<Sequence>(std::move(r));
  s->tokens = s->req.prompt_ids;
  s->num_prompt = prompt_len;
  return s;
}

TEST(Scheduler, AdmitsInOrderWithinTheBudgetAndChunksTheLastPrompt) {
  kv::PagedKvCache cache({kv::LayerShape{1, 0}}, 16, 4);
  Scheduler sched(cache, {8, 10, false});
  sched.add(seq(6));
  sched.add(seq(6));
  sched.add(seq(6));
  ScheduleCounts counts;
  auto batch = sched.schedule(counts);
  ASSERT_EQ(batch.size(), 2u);  // 6 + a chunk of 4; the third waits (no budget left)
  EXPECT_EQ(batch[0].tokens, 6);
  EXPECT_EQ(batch[1].tokens, 4);
  EXPECT_EQ(counts.admitted_prompt_tokens, 12);
  EXPECT_EQ(sched.running(), 2);
  EXPECT_EQ(sched.waiting(), 1);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  kv::PagedKvCache cache({kv::LayerShape{1, 0}}, 3, 4);  // 12 slots
  Scheduler sched(cache, {8, 64, false});
  sched.add(seq(4));
  sched.add(seq(8));
  ScheduleCounts counts;
  auto first = sched.schedule(counts);
  ASSERT_EQ(first.size(), 2u);  // every block taken
  for (auto& b : first) {
    b.seq->computed += b.tokens;
    b.seq->tokens.push_back(7);  // each sampled a token: the oldest now needs a fifth slot
  }
  auto second = sched.schedule(counts);
  EXPECT_EQ(counts.preemptions, 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].seq->num_prompt, 4);  // the oldest runs on
  EXPECT_EQ(sched.waiting(), 1);            // the newest waits, its KV gone
}

TEST(BatchBuilder, FlattensAndSamplesOnlyFinishedPrompts) {
  kv::PagedKvCache cache({kv::LayerShape{1, 0}}, 16, 4);
  auto a = seq(3), b = seq(5);
  a->kv.emplace(cache);
  b->kv.emplace(cache);
  ASSERT_TRUE(a->kv->reserve(3));
  ASSERT_TRUE(b->kv->reserve(2));
  std::vector<ScheduledSeq> batch = {{a.get(), 3}, {b.get(), 2}};  // b reads a prompt chunk
  BatchBuilder bb;
  bb.build(batch);
  EXPECT_EQ(std::vector<int64_t>(bb.ids().begin(), bb.ids().end()), (std::vector<int64_t>{1, 2, 3, 1, 2}));
  EXPECT_EQ(std::vector<int64_t>(bb.positions().begin(), bb.positions().end()), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  ASSERT_EQ(bb.slices().size(), 2u);
  EXPECT_EQ(bb.slices()[1].first_token, 3);
  EXPECT_EQ(bb.slices()[1].context_len, 2);
  EXPECT_EQ(std::vector<int64_t>(bb.logit_rows().begin(), bb.logit_rows().end()), (std::vector<int64_t>{2}));
  ASSERT_EQ(bb.uses().size(), 1u);
  EXPECT_EQ(bb.uses()[0].seq, 0u);
  EXPECT_EQ(bb.uses()[0].position, 2);
  EXPECT_TRUE(bb.uses()[0].sample);
}

TEST(OutputProcessor, FinishReasons) {
  const std::vector<float> row = {0.f, 0.f, 5.f, 0.f};  // greedy picks 2
  OutputProcessor eos_is_2(nullptr, {2}, 100);
  auto s = seq(3, 4);
  eos_is_2.attach(*s);
  auto t = eos_is_2.on_row(*s, row);
  ASSERT_TRUE(t.finish.has_value());
  EXPECT_EQ(*t.finish, FinishReason::stop);
  ASSERT_EQ(t.event.tokens.size(), 1u);
  EXPECT_EQ(t.event.tokens[0].id, 2);

  auto ignoring = seq(3, 2);
  ignoring->req.ignore_eos = true;
  eos_is_2.attach(*ignoring);
  EXPECT_FALSE(eos_is_2.on_row(*ignoring, row).finish.has_value());
  EXPECT_EQ(eos_is_2.on_row(*ignoring, row).finish, FinishReason::length);  // max_tokens 2

  OutputProcessor short_context(nullptr, {}, 4);
  auto c = seq(3, 10);
  short_context.attach(*c);
  EXPECT_EQ(short_context.on_row(*c, row).finish, FinishReason::length);  // 3 + 1 = the context
  EXPECT_STREQ(openai_name(FinishReason::length), "length");
  EXPECT_STREQ(openai_name(FinishReason::abort), "abort");
}

}  // namespace engine_parts_test
}  // namespace fuselm::engine
