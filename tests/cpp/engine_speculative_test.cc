// Speculative decoding (engine/speculative.h) over fake models whose next-token logits are read
// back from the KV cache through the sequence's slots, so a draft's row left where a real token's
// should be, or a wrong count of accepted tokens, changes the text. Oracles: the request decoded
// alone by the Sampler without any engine (greedy and n-gram drafts must give the same tokens),
// and the exact target distribution computed from the fake's logits (the acceptance rule's
// output, with a draft model whose distribution differs, must follow it).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/drafter_ngram.h"
#include "engine/engine.h"
#include "engine/speculative_sampling.h"

namespace fuselm::engine {
namespace engine_speculative_test {

constexpr int64_t kVocab = 37;

// The fake model's logits after `ctx`. With `markov` > 0 the token f(last two tokens) gets that
// much more (greedy text then cycles, so n-grams recur); `salt` makes another model.
std::vector<float> fake_logits(const std::vector<int64_t>& ctx, float markov, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (size_t q = 0; q < ctx.size(); ++q) h = (h ^ static_cast<uint64_t>(ctx[q] * 131 + q)) * 1099511628211ull;
  std::vector<float> row(kVocab);
  for (int64_t t = 0; t < kVocab; ++t) row[t] = static_cast<float>(((h >> 7) + t * (h % 11 + 3)) % 23) / 3.0f;
  if (markov > 0 && ctx.size() >= 2) {
    const uint64_t pair = static_cast<uint64_t>(ctx[ctx.size() - 2] * kVocab + ctx.back());
    // Salt bit 0: another choice on a third of the pairs; bit 1: on every pair.
    const uint64_t other = (salt & 1 ? pair % 3 == 0 : 0) + (salt & 2 ? 1 : 0);
    row[(pair * 2654435761u + other) % kVocab] += markov;
  }
  return row;
}

class FakeModel : public Backend {
 public:
  FakeModel(int32_t blocks, int32_t block_size, float markov, uint64_t salt)
      : cache_({kv::LayerShape{1, 0}}, blocks, block_size), markov_(markov), salt_(salt) {}
  const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> seqs, std::span<const int64_t> logit_rows) override {
    ++forwards;
    max_rows_seen = std::max<int64_t>(max_rows_seen, static_cast<int64_t>(logit_rows.size()));
    all_.assign(ids.size() * kVocab, 0.f);
    float* k = cache_.k(0);
    for (const auto& s : seqs) {
      const int64_t start = s.context_len - s.num_tokens;
      for (int64_t j = 0; j < s.num_tokens; ++j) {
        EXPECT_EQ(positions[s.first_token + j], start + j);
        k[s.slots[start + j]] = static_cast<float>(ids[s.first_token + j]);
        std::vector<int64_t> ctx;
        for (int64_t q = 0; q <= start + j; ++q) ctx.push_back(static_cast<int64_t>(k[s.slots[q]]));
        auto row = fake_logits(ctx, markov_, salt_);
        std::copy(row.begin(), row.end(), all_.begin() + (s.first_token + j) * kVocab);
      }
    }
    logits_.clear();
    for (int64_t r : logit_rows) logits_.insert(logits_.end(), all_.begin() + r * kVocab, all_.begin() + (r + 1) * kVocab);
    const int64_t shape[3] = {1, static_cast<int64_t>(logit_rows.size()), kVocab};
    out_ = runtime::Tensor::contiguous_view(logits_.data(), runtime::DType::f32, shape);
    return out_;
  }
  kv::PagedKvCache& kv_cache() override { return cache_; }
  int64_t max_context() const override { return 512; }
  int64_t vocab_size() const override { return kVocab; }
  const std::vector<int64_t>& eos_token_ids() const override { return eos_; }
  int64_t forwards = 0, max_rows_seen = 0;

 private:
  kv::PagedKvCache cache_;
  float markov_;
  uint64_t salt_;
  std::vector<int64_t> eos_;
  std::vector<float> all_, logits_;
  runtime::Tensor out_;
};

// The request decoded alone: its Sampler over the target's logits, one token at a time.
std::vector<int64_t> alone(const Request& r, float markov) {
  Sampler s(r.sampling);
  s.set_prompt(r.prompt_ids);
  std::vector<int64_t> ctx = r.prompt_ids, out;
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    const int64_t t = s.sample(fake_logits(ctx, markov, 0)).token;
    out.push_back(t);
    ctx.push_back(t);
  }
  return out;
}

Request make_request(int64_t prompt_len, int64_t max_tokens, int64_t salt, float temperature) {
  Request r;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back((i * 7 + salt * 3) % kVocab);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = static_cast<uint64_t>(salt) * 977 + 1;
  return r;
}

std::vector<int64_t> drain(RequestStream& st) {
  std::vector<int64_t> out;
  Event e;
  while (st.next(e, std::chrono::milliseconds(0)))
    for (const auto& t : e.tokens) out.push_back(t.id);
  return out;
}

void run_until_idle(Engine& eng) {
  for (int i = 0; i < 1000000 && eng.step(); ++i) {
  }
}

EngineOptions spec_options(SpecMethod method, int32_t k, Backend* draft, bool prefix_caching = true) {
  EngineOptions o{8, 64, 100000, prefix_caching};
  o.speculative.method = method;
  o.speculative.num_tokens = k;
  o.speculative.ngram_min = 1;
  o.speculative.ngram_max = 3;
  o.speculative.disable_by_batch_size = 1 << 20;
  o.speculative.min_acceptance = 0;  // never pause: every step drafts what it can
  o.speculative.draft_model = draft;
  return o;
}

TEST(SpeculativeSampling, NgramLookupTakesTheMostRecentOccurrenceWithAFullContinuation) {
  const std::vector<int64_t> t{1, 2, 3, 9, 1, 2, 4, 5, 6, 7, 1, 2};
  EXPECT_EQ(ngram_lookup(t, 1, 2, 3), (std::vector<int64_t>{4, 5, 6}));   // "1 2" at 4, not at 0
  EXPECT_EQ(ngram_lookup(t, 1, 2, 5), (std::vector<int64_t>{4, 5, 6, 7, 1}));
  EXPECT_EQ(ngram_lookup(t, 3, 3, 3), (std::vector<int64_t>{}));  // "7 1 2" never recurs
  const std::vector<int64_t> u{5, 6, 8, 5, 6};
  EXPECT_EQ(ngram_lookup(u, 1, 2, 4), (std::vector<int64_t>{8, 5, 6}));  // fewer than k follow
}

TEST(SpeculativeSampling, AcceptanceRuleOutputFollowsTheTarget) {
  // x ~ q, judged against p: the output must be distributed as p (chi-square, 3 degrees of
  // freedom, 0.1 % critical value 16.27) and accepted with probability sum(min(p, q)) = 0.6.
  const std::vector<float> p{0.1f, 0.2f, 0.3f, 0.4f}, q{0.4f, 0.3f, 0.2f, 0.1f};
  std::mt19937_64 rng(7);
  const int n = 200000;
  std::vector<int> count(4, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t x = draw_from(q, rng);
    const Verdict v = judge_draft(p, q, x, rng);
    ++count[v.token];
    accepted += v.accepted;
    if (v.accepted) EXPECT_EQ(v.token, x);
  }
  double chi2 = 0;
  for (int t = 0; t < 4; ++t) chi2 += std::pow(count[t] - n * p[t], 2) / (n * p[t]);
  EXPECT_LT(chi2, 16.27);
  EXPECT_NEAR(static_cast<double>(accepted) / n, 0.6, 0.01);
  // The draft's own distribution is far from p: the test would see a rule that kept the drafts.
  double chi2_q = 0;
  for (int t = 0; t < 4; ++t) chi2_q += std::pow(n * q[t] - n * p[t], 2) / (n * p[t]);
  EXPECT_GT(chi2_q, 1000);
}

TEST(Speculative, GreedyAndSampledNgramOutputsEqualPlainDecoding) {
  // Point-mass drafts are judged by the target's own sample, so even sampled text is plain
  // decoding's, token for token, for every K; blocks of 4 tokens make drafts cross blocks.
  for (int32_t k : {1, 3, 6}) {
    FakeModel target(400, 4, 6.f, 0);
    Engine eng(target, nullptr, spec_options(SpecMethod::ngram, k, nullptr));
    std::vector<Request> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      reqs.push_back(make_request(3 + i * 4, 40 + i * 5, i, i % 2 ? 0.8f : 0.f));
      streams.push_back(eng.submit(reqs.back()));
    }
    run_until_idle(eng);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(drain(*streams[i]), alone(reqs[i], 6.f)) << "K " << k << " request " << i;
    const auto m = eng.metrics();
    EXPECT_GT(m.spec_accepted_tokens, 0) << "K " << k;
    EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << "K " << k;  // rejections happened too
    EXPECT_EQ(m.pool.used, 0);
    EXPECT_LE(target.max_rows_seen, 6 * (k + 1));
  }
}

TEST(Speculative, GreedyDraftModelOutputEqualsPlainDecodingAndRejectedDraftsLeaveNoTrace) {
  // The draft model agrees with the target on most steps, not all; the pool is tight (preemption,
  // recompute), and prefix caching is on: a second round of requests whose prompts are the first
  // round's prompts plus outputs reads blocks the first round published.
  for (int32_t k : {2, 5}) {
    FakeModel target(60, 4, 6.f, 0), draft(400, 4, 6.f, 1);
    Engine eng(target, nullptr, spec_options(SpecMethod::draft, k, &draft));
    std::vector<Request> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 5; ++i) {
      reqs.push_back(make_request(5 + i * 3, 30, i + 10, 0.f));
      streams.push_back(eng.submit(reqs.back()));
    }
    run_until_idle(eng);
    std::vector<Request> again;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto out = drain(*streams[i]);
      EXPECT_EQ(out, alone(reqs[i], 6.f)) << "K " << k << " request " << i;
      Request r = reqs[i];
      r.prompt_ids.insert(r.prompt_ids.end(), out.begin(), out.end());
      r.max_tokens = 8;
      again.push_back(r);
    }
    const auto m1 = eng.metrics();
    EXPECT_GT(m1.spec_accepted_tokens, 0);
    EXPECT_LT(m1.spec_accepted_tokens, m1.spec_draft_tokens);
    for (const auto& r : again) {
      auto st = eng.submit(r);
      run_until_idle(eng);
      EXPECT_EQ(drain(*st), alone(r, 6.f)) << "K " << k;
    }
    EXPECT_GT(eng.metrics().pool.prefix_hits, 0);
    EXPECT_EQ(eng.metrics().pool.used, 0);
  }
}

TEST(Speculative, BacksOffWhenDraftsFailAndWhenTheBatchIsLarge) {
  // A draft model that never agrees (its Markov choice is always another token, and the choice
  // outweighs the rest of the logits): a sequence's pauses double, so over 100 tokens it drafts in
  // a handful of steps, not in every one; the text is still plain decoding's.
  {
    FakeModel target(400, 4, 20.f, 0), draft(400, 4, 20.f, 2);
    EngineOptions o = spec_options(SpecMethod::draft, 4, &draft);
    o.speculative.min_acceptance = 0.3;
    Engine eng(target, nullptr, o);
    const Request r = make_request(6, 100, 3, 0.f);
    auto st = eng.submit(r);
    run_until_idle(eng);
    EXPECT_EQ(drain(*st), alone(r, 20.f));
    const auto m = eng.metrics();
    EXPECT_EQ(m.spec_accepted_tokens, 0);
    EXPECT_GT(m.spec_drafts, 0);
    EXPECT_LE(m.spec_drafts, 8);  // steps 1, 2, then after pauses of 4, 8, 16, 32, 64
  }
  // Six sequences running together with disable_by_batch_size 5: no drafts at all, although the
  // same requests alone (batch size 1) draft.
  for (const int32_t limit : {5, 6}) {
    FakeModel target(400, 4, 6.f, 0);
    EngineOptions o = spec_options(SpecMethod::ngram, 3, nullptr);
    o.speculative.disable_by_batch_size = limit;
    Engine eng(target, nullptr, o);
    std::vector<Request> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      reqs.push_back(make_request(4, 30, i, 0.f));
      streams.push_back(eng.submit(reqs.back()));
    }
    run_until_idle(eng);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(drain(*streams[i]), alone(reqs[i], 6.f));
    if (limit == 5) EXPECT_EQ(eng.metrics().spec_draft_tokens, 0);
    else EXPECT_GT(eng.metrics().spec_draft_tokens, 0);
  }
}

// The exact distribution of the first two generated tokens' marginals under the target.
std::pair<std::vector<double>, std::vector<double>> exact_marginals(const std::vector<int64_t>& prompt, float temperature) {
  auto softmax = [&](const std::vector<float>& l) {
    std::vector<double> p(l.size());
    double z = 0;
    for (size_t i = 0; i < l.size(); ++i) z += (p[i] = std::exp(l[i] / temperature));
    for (double& v : p) v /= z;
    return p;
  };
  const auto p1 = softmax(fake_logits(prompt, 0, 0));
  std::vector<double> p2(kVocab, 0.0);
  for (int64_t t = 0; t < kVocab; ++t) {
    auto ctx = prompt;
    ctx.push_back(t);
    const auto c = softmax(fake_logits(ctx, 0, 0));
    for (int64_t u = 0; u < kVocab; ++u) p2[u] += p1[t] * c[u];
  }
  return {p1, p2};
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double tv = 0;
  for (size_t i = 0; i < a.size(); ++i) tv += std::abs(a[i] - b[i]);
  return tv / 2;
}

TEST(Speculative, SampledDraftModelOutputFollowsTheTargetDistribution) {
  // A draft model with other logits (salt 2) drafts K = 2 at temperature 1 for 20000 seeds of one
  // prompt; the first two tokens' empirical marginals must be within total variation 0.035 of the
  // target's exact ones (sampling noise alone gives about 0.017), while the draft model's own
  // first-token distribution is much further away.
  FakeModel target(4000, 4, 0.f, 0), draft(4000, 4, 0.f, 2);
  EngineOptions o = spec_options(SpecMethod::draft, 2, &draft, false);
  o.max_num_seqs = 256;
  o.max_num_batched_tokens = 4096;
  Engine eng(target, nullptr, o);
  const std::vector<int64_t> prompt{3, 14, 15, 9};
  const int n = 20000;
  std::vector<double> m1(kVocab, 0.0), m2(kVocab, 0.0);
  for (int done = 0; done < n;) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 256 && done < n; ++i, ++done) {
      Request r;
      r.prompt_ids = prompt;
      r.max_tokens = 3;
      r.sampling.temperature = 1.f;
      r.sampling.seed = static_cast<uint64_t>(done) * 7919 + 3;
      streams.push_back(eng.submit(r));
    }
    run_until_idle(eng);
    for (auto& st : streams) {
      const auto out = drain(*st);
      ASSERT_EQ(out.size(), 3u);
      m1[out[0]] += 1.0 / n;
      m2[out[1]] += 1.0 / n;
    }
  }
  const auto [p1, p2] = exact_marginals(prompt, 1.f);
  EXPECT_LT(total_variation(m1, p1), 0.035);
  EXPECT_LT(total_variation(m2, p2), 0.035);
  std::vector<float> dl = fake_logits(prompt, 0, 2);
  std::vector<double> q1(kVocab);
  double z = 0;
  for (int64_t t = 0; t < kVocab; ++t) z += (q1[t] = std::exp(dl[t]));
  for (double& v : q1) v /= z;
  EXPECT_GT(total_variation(q1, p1), 0.15);
  const auto m = eng.metrics();
  const double rate = static_cast<double>(m.spec_accepted_tokens) / static_cast<double>(m.spec_draft_tokens);
  EXPECT_GT(rate, 0.1);
  EXPECT_LT(rate, 0.95);
}

TEST(Speculative, DraftVocabularyMustMatch) {
  class Other : public FakeModel {
   public:
    using FakeModel::FakeModel;
    int64_t vocab_size() const override { return kVocab + 1; }
  };
  FakeModel target(40, 4, 0.f, 0);
  Other draft(40, 4, 0.f, 1);
  try {
    Engine eng(target, nullptr, spec_options(SpecMethod::draft, 3, &draft));
    FAIL() << "a draft model with another vocabulary was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(38 tokens) differs from the target's (37 tokens)"), std::string::npos) << e.what();
  }
}

}  // namespace engine_speculative_test
}  // namespace fuselm::engine
