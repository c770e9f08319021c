// The serving engine over a fake model whose next-token logits are a function of the whole
// context as read back from the KV cache through the sequence's slots. So any slot mix-up
// (prefix-cache reuse, preemption and recompute, chunked prefill, batching) changes the text;
// every output is compared with the same request run on its own, token by token.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "engine/engine.h"
#include "engine/stop_matcher.h"

namespace fuselm::engine {
namespace engine_scheduler_test {

constexpr int64_t kVocab = 37;

// Logits of the next token after a context: a spread distribution that depends on every token.
std::vector<float> reference_logits(const std::vector<int64_t>& ctx) {
  uint64_t h = 1469598103934665603ull;
  for (size_t q = 0; q < ctx.size(); ++q) h = (h ^ static_cast<uint64_t>(ctx[q] * 131 + q)) * 1099511628211ull;
  std::vector<float> row(kVocab);
  for (int64_t t = 0; t < kVocab; ++t) row[t] = static_cast<float>(((h >> 7) + t * (h % 11 + 3)) % 23) / 3.0f;
  return row;
}

class FakeBackend : public Backend {
 public:
  FakeBackend(int32_t blocks, int32_t block_size, int64_t ctx = 512)
      : cache_({kv::LayerShape{1, 0}}, blocks, block_size), ctx_(ctx) {}
  const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> seqs,
                                 std::span<const int64_t> logit_rows) override {
    ++forwards;
    max_tokens_seen = std::max<int64_t>(max_tokens_seen, static_cast<int64_t>(ids.size()));
    max_rows_seen = std::max<int64_t>(max_rows_seen, static_cast<int64_t>(logit_rows.size()));
    EXPECT_FALSE(logit_rows.empty());
    all_.assign(ids.size() * kVocab, 0.f);
    float* k = cache_.k(0);
    for (const auto& s : seqs) {
      const int64_t start = s.context_len - s.num_tokens;
      for (int64_t j = 0; j < s.num_tokens; ++j) {
        EXPECT_EQ(positions[s.first_token + j], start + j);
        k[s.slots[start + j]] = static_cast<float>(ids[s.first_token + j]);
        std::vector<int64_t> ctx;
        for (int64_t q = 0; q <= start + j; ++q) ctx.push_back(static_cast<int64_t>(k[s.slots[q]]));
        auto row = reference_logits(ctx);
        std::copy(row.begin(), row.end(), all_.begin() + (s.first_token + j) * kVocab);
      }
    }
    logits_.clear();  // the rows asked for, in order (as the model's LM head after select_rows)
    for (int64_t r : logit_rows) {
      EXPECT_GE(r, 0);
      EXPECT_LT(r, static_cast<int64_t>(ids.size()));
      logits_.insert(logits_.end(), all_.begin() + r * kVocab, all_.begin() + (r + 1) * kVocab);
    }
    const int64_t shape[3] = {1, static_cast<int64_t>(logit_rows.size()), kVocab};
    out_ = runtime::Tensor::contiguous_view(logits_.data(), runtime::DType::f32, shape);
    return out_;
  }
  kv::PagedKvCache& kv_cache() override { return cache_; }
  int64_t max_context() const override { return ctx_; }
  int64_t vocab_size() const override { return kVocab; }
  const std::vector<int64_t>& eos_token_ids() const override { return eos_; }
  std::vector<int64_t> eos_;
  int64_t forwards = 0, max_tokens_seen = 0, max_rows_seen = 0;

 private:
  kv::PagedKvCache cache_;
  int64_t ctx_;
  std::vector<float> all_, logits_;
  runtime::Tensor out_;
};

// The request run on its own, without any engine: sampler over reference logits.
std::vector<int64_t> alone(const Request& r, const std::vector<int64_t>& eos = {}) {
  Sampler s(r.sampling);
  s.set_prompt(r.prompt_ids);
  std::vector<int64_t> ctx = r.prompt_ids, out;
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    auto row = reference_logits(ctx);
    int64_t t = s.sample(row).token;
    out.push_back(t);
    ctx.push_back(t);
    if (std::find(eos.begin(), eos.end(), t) != eos.end()) break;
  }
  return out;
}

Request make_request(int64_t prompt_len, int64_t max_tokens, int64_t salt, float temperature = 0.f) {
  Request r;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back((i * 7 + salt * 3) % kVocab);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = static_cast<uint64_t>(salt) * 977;
  r.logprobs = true;
  return r;
}

struct Collected {
  std::vector<int64_t> tokens;
  Event last;
};

Collected drain(RequestStream& st) {
  Collected c;
  Event e;
  while (st.next(e, std::chrono::milliseconds(0))) {
    for (const auto& t : e.tokens) c.tokens.push_back(t.id);
    if (e.finished) c.last = e;
  }
  return c;
}

void run_until_idle(Engine& eng, int max_steps = 100000) {
  for (int i = 0; i < max_steps && eng.step(); ++i) {
  }
}

TEST(Engine, BatchedChunkedAndPreemptedOutputsEqualEachRequestAlone) {
  // 24 blocks of 4 tokens = 96 slots: far less than the requests need together, so sequences are
  // preempted and recomputed; 16 batched tokens force chunked prefill.
  FakeBackend be(24, 4);
  Engine eng(be, nullptr, EngineOptions{8, 16, 100, true});
  std::vector<Request> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i) {
    reqs.push_back(make_request(3 + (i * 5) % 37, 6 + i % 9, i, i % 2 ? 0.8f : 0.f));
    streams.push_back(eng.submit(reqs.back()));
  }
  run_until_idle(eng);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto c = drain(*streams[i]);
    EXPECT_EQ(c.tokens, alone(reqs[i])) << "request " << i;
    EXPECT_TRUE(c.last.finished);
    EXPECT_EQ(c.last.finish_reason, FinishReason::length);
    EXPECT_EQ(c.last.completion_tokens, reqs[i].max_tokens);
    EXPECT_EQ(c.last.prompt_tokens, static_cast<int64_t>(reqs[i].prompt_ids.size()));
  }
  const auto m = eng.metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_EQ(m.pool.used, 0);
  EXPECT_EQ(m.running + m.waiting, 0);
  EXPECT_LE(be.max_tokens_seen, 16);
  EXPECT_LE(be.max_rows_seen, 8);  // one LM-head row per sampling sequence, never a whole chunk
  EXPECT_EQ(m.requests_finished, 12);
}

TEST(Engine, ChoicesOfOnePromptShareItsBlocksAndKeepTheirOwnText) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{8, 64, 100, true});
  std::vector<Request> reqs;
  for (int64_t i = 0; i < 3; ++i) {
    Request r = make_request(22, 6, 5, 0.9f);
    r.sampling.seed = choice_seed(r.sampling.seed, i);
    reqs.push_back(r);
  }
  reqs.push_back(make_request(9, 4, 6));  // another prompt in the same group: not gated
  auto streams = eng.submit_group(reqs);
  ASSERT_EQ(streams.size(), 4u);
  run_until_idle(eng);
  std::vector<std::vector<int64_t>> texts;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto c = drain(*streams[i]);
    EXPECT_EQ(c.tokens, alone(reqs[i])) << "choice " << i;
    texts.push_back(c.tokens);
  }
  EXPECT_NE(texts[0], texts[1]);  // each choice samples with its own seed
  EXPECT_NE(texts[1], texts[2]);
  const auto m = eng.metrics();
  EXPECT_EQ(m.shared_prompt_tokens, 2 * 20);  // choices 1 and 2 took 5 full blocks of choice 0's prompt
  EXPECT_EQ(m.cached_prompt_tokens, 2 * 20);
  EXPECT_EQ(m.pool.used, 0);
}

TEST(Engine, PromptLogprobsAreThoseOfTheRowBeforeEachToken) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 8, 100, true});  // 8 batched tokens: the prompt in chunks
  Request warm = make_request(19, 2, 8);
  eng.submit(warm);
  run_until_idle(eng);  // its blocks are in the prefix cache, which prompt logprobs must not use
  Request r = warm;
  r.prompt_logprobs = true;
  r.sampling.top_logprobs = 2;
  auto st = eng.submit(r);
  run_until_idle(eng);
  Event e;
  ASSERT_TRUE(st->next(e, std::chrono::milliseconds(0)));
  ASSERT_EQ(e.prompt_logprobs.size(), r.prompt_ids.size());
  EXPECT_EQ(e.prompt_logprobs[0].id, r.prompt_ids[0]);
  for (size_t p = 1; p < r.prompt_ids.size(); ++p) {
    const auto row = reference_logits({r.prompt_ids.begin(), r.prompt_ids.begin() + static_cast<std::ptrdiff_t>(p)});
    double z = 0;
    for (float x : row) z += std::exp(static_cast<double>(x));
    EXPECT_NEAR(e.prompt_logprobs[p].logprob, row[r.prompt_ids[p]] - std::log(z), 1e-5) << "position " << p;
    ASSERT_EQ(e.prompt_logprobs[p].top.size(), 2u);
    EXPECT_GE(e.prompt_logprobs[p].top[0].second, e.prompt_logprobs[p].top[1].second);
  }
  EXPECT_EQ(e.tokens.size(), 1u);
  auto rest = drain(*st);
  EXPECT_EQ(rest.last.cached_tokens, 0);
}

TEST(Engine, EmbeddingRequestsNeedHiddenStates) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  Request r = make_request(5, 1, 1);
  r.embed = Pooling::mean;
  EXPECT_THROW(eng.submit(r), RequestError);  // the fake exposes none
}

TEST(Engine, LogitBiasIdsAndMinTokensAreChecked) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  Request r = make_request(5, 3, 1);
  r.sampling.logit_bias = {{kVocab, 1.f}};
  EXPECT_THROW(eng.submit(r), RequestError);
  r.sampling.logit_bias = {{1, 101.f}};
  EXPECT_THROW(eng.submit(r), RequestError);
  r.sampling.logit_bias = {};
  r.sampling.min_tokens = 4;
  EXPECT_THROW(eng.submit(r), RequestError);
}

TEST(Engine, MinTokensMasksEosUntilReached) {
  Request r = make_request(6, 10, 2);
  const auto free_run = alone(r);
  FakeBackend be(64, 4);
  be.eos_ = {free_run[0]};  // greedy would end at once
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  auto st = eng.submit(r);
  run_until_idle(eng);
  EXPECT_EQ(drain(*st).tokens.size(), 1u);
  r.sampling.min_tokens = 3;
  auto held = eng.submit(r);
  run_until_idle(eng);
  auto c = drain(*held);
  ASSERT_GE(c.tokens.size(), 3u);
  for (size_t i = 0; i + 1 < 3; ++i) EXPECT_NE(c.tokens[i], free_run[0]);
}

TEST(Engine, RepeatedPromptHitsThePrefixCache) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  Request r = make_request(30, 5, 3);
  auto a = eng.submit(r);
  run_until_idle(eng);
  auto b = eng.submit(r);
  run_until_idle(eng);
  auto ca = drain(*a), cb = drain(*b);
  EXPECT_EQ(ca.last.cached_tokens, 0);
  EXPECT_EQ(cb.last.cached_tokens, 28);  // 7 full blocks; the 30th token is computed for logits
  EXPECT_EQ(ca.tokens, alone(r));
  EXPECT_EQ(cb.tokens, alone(r));
  EXPECT_EQ(eng.metrics().pool.prefix_hits, 7);
}

TEST(Engine, CancelFreesEveryBlock) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  auto s = eng.submit(make_request(20, 100, 1));
  for (int i = 0; i < 5; ++i) eng.step();
  EXPECT_GT(eng.metrics().pool.used, 0);
  s->cancel();
  eng.step();
  auto c = drain(*s);
  EXPECT_EQ(c.last.finish_reason, FinishReason::abort);
  EXPECT_EQ(eng.metrics().pool.used, 0);
  EXPECT_EQ(eng.metrics().requests_aborted, 1);
}

TEST(Engine, StopsAtEosAndStopTokenIds) {
  FakeBackend be(64, 4);
  Request r = make_request(9, 30, 5);
  auto full = alone(r);
  be.eos_ = {full[3]};
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  auto a = eng.submit(r);
  Request ignoring = r;
  ignoring.ignore_eos = true;
  auto b = eng.submit(ignoring);
  Request by_id = r;
  by_id.ignore_eos = true;
  by_id.stop_token_ids = {full[5]};
  auto c = eng.submit(by_id);
  run_until_idle(eng);
  auto ca = drain(*a), cb = drain(*b), cc = drain(*c);
  const auto first_eos = std::find(full.begin(), full.end(), full[3]) - full.begin();
  EXPECT_EQ(ca.tokens, std::vector<int64_t>(full.begin(), full.begin() + first_eos + 1));
  EXPECT_EQ(ca.last.finish_reason, FinishReason::stop);
  EXPECT_EQ(cb.tokens, full);
  EXPECT_EQ(cb.last.finish_reason, FinishReason::length);
  const auto first_stop = std::find(full.begin(), full.end(), full[5]) - full.begin();
  EXPECT_EQ(cc.tokens.size(), static_cast<size_t>(first_stop + 1));
  EXPECT_EQ(cc.last.finish_reason, FinishReason::stop);
}

TEST(Engine, RefusesWhatCannotFit) {
  FakeBackend be(8, 4, 40);
  Engine eng(be, nullptr);
  auto status = [&](Request r) {
    try {
      eng.submit(std::move(r));
    } catch (const RequestError& e) {
      return e.status;
    }
    return 200;
  };
  EXPECT_EQ(status(make_request(0, 4, 1)), 400);
  EXPECT_EQ(status(make_request(30, 11, 1)), 400);  // past the context of 40
  EXPECT_EQ(status(make_request(30, 3, 1)), 400);   // past the pool of 32 tokens
  Request bad = make_request(3, 3, 1);
  bad.prompt_ids[1] = kVocab;
  EXPECT_EQ(status(bad), 400);
  Request hot = make_request(3, 3, 1);
  hot.sampling.top_p = 0.f;
  EXPECT_EQ(status(hot), 400);
  Request stops = make_request(3, 3, 1);
  stops.stop = {"x"};
  EXPECT_EQ(status(stops), 400);  // no tokenizer
  EXPECT_EQ(status(make_request(3, 3, 1)), 200);
}

TEST(Engine, AFullQueueAnswers503) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 64, 2, true});
  eng.submit(make_request(3, 3, 1));
  eng.submit(make_request(3, 3, 2));
  try {
    eng.submit(make_request(3, 3, 3));
    FAIL() << "a third request was queued";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 503);
  }
  run_until_idle(eng);
  EXPECT_NO_THROW(eng.submit(make_request(3, 3, 4)));
}

TEST(Engine, ThreadServesStreamsAndShutsDown) {
  FakeBackend be(64, 4);
  Engine eng(be, nullptr, EngineOptions{4, 32, 100, true});
  eng.start();
  std::vector<Request> reqs;
  std::vector<std::shared_ptr<RequestStream>> st;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(make_request(5 + i, 8, 10 + i, 1.0f));
    st.push_back(eng.submit(reqs.back()));
  }
  for (size_t i = 0; i < st.size(); ++i) {
    std::vector<int64_t> got;
    Event e;
    while (st[i]->next(e, std::chrono::seconds(30))) {
      for (const auto& t : e.tokens) got.push_back(t.id);
      if (e.finished) break;
    }
    EXPECT_TRUE(e.finished);
    EXPECT_EQ(got, alone(reqs[i]));
  }
  eng.shutdown(false);
  EXPECT_THROW(eng.submit(make_request(3, 3, 1)), RequestError);
}

TEST(StopMatcher, MatchesAcrossPiecesAndDropsTheStop) {
  StopMatcher m({"END", "\n\n"});
  std::string out = m.feed("Hello E");
  out += m.feed("N");
  EXPECT_EQ(out, "Hello ");
  out += m.feed("Dless");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(out, "Hello ");
  StopMatcher n({"END"});
  std::string o = n.feed("abcE");
  EXPECT_EQ(o, "abc");  // "E" may start "END"
  o += n.feed("Nx");
  o += n.flush();
  EXPECT_FALSE(n.matched());
  EXPECT_EQ(o, "abcENx");
}

TEST(Sampler, PenaltiesMinPAndTopLogprobs) {
  // Greedy picks token 2; a repetition penalty on it (it is in the prompt) hands the pick to 1.
  std::vector<float> row = {0.f, 1.9f, 2.f, -1.f};
  SamplingParams p;
  p.repetition_penalty = 2.f;
  p.top_logprobs = 2;
  Sampler s(p);
  s.set_prompt(std::vector<int64_t>{2});
  auto t = s.sample(row);
  EXPECT_EQ(t.token, 1);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 2);  // logprobs stay those of the raw distribution
  double z = 0;
  for (float x : row) z += std::exp(x);
  EXPECT_NEAR(t.top[0].second, 2.f - std::log(z), 1e-5);
  EXPECT_NEAR(t.logprob, 1.9f - std::log(z), 1e-5);
  // A frequency penalty grows with each repeat of the output token.
  SamplingParams f;
  f.frequency_penalty = 0.06f;
  Sampler g(f);
  EXPECT_EQ(g.sample(row).token, 2);
  EXPECT_EQ(g.sample(row).token, 2);  // 2 - 0.06 = 1.94 > 1.9
  EXPECT_EQ(g.sample(row).token, 1);  // 2 - 0.12 < 1.9
  // min_p 0.99 at any temperature keeps only the top token.
  SamplingParams mp;
  mp.temperature = 2.f;
  mp.min_p = 0.99f;
  mp.seed = 11;
  Sampler h(mp);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(h.sample(row).token, 2);
}

}  // namespace engine_scheduler_test
}  // namespace fuselm::engine
