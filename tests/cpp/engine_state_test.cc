// Per-sequence recurrent state in the engine (docs/recurrent.md): state slots, checkpoints, pool
// sizing, and the serving engine over a fake stateful model. The fake keeps, per state slot, a
// running hash of every token the sequence has read (as a recurrent layer keeps its state), starts
// from zeros when context_len - num_tokens is 0 (the contract), and its logits are a function of
// that state only. So a sequence that resumes from the prefix cache without the matching state,
// keeps a stale slot, or shares a slot with another, produces other tokens than the oracle: the
// same request computed token by token from scratch.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "kv/pool_sizing.h"
#include "kv/state_pool.h"

namespace fuselm::engine {
namespace engine_state_test {

constexpr int64_t kVocab = 41;
constexpr int64_t kP1 = 8388593, kP2 = 4194301;  // primes below 2^23: every state value is an exact f32

struct Hash {
  int64_t a = 0, b = 0, n = 0;
  void add(int64_t tok) {
    a = (a * 31 + tok + 1) % kP1;
    b = (b * 37 + tok * 5 + 3) % kP2;
    ++n;
  }
};

std::vector<float> logits_of(const Hash& h) {
  std::vector<float> row(kVocab);
  const uint64_t x = static_cast<uint64_t>(h.a) * 2654435761u ^ static_cast<uint64_t>(h.b) * 40503u;
  for (int64_t t = 0; t < kVocab; ++t) row[t] = static_cast<float>(((x >> 5) + t * (x % 13 + 2)) % 29) / 3.0f;
  return row;
}

class StatefulBackend : public Backend {
 public:
  StatefulBackend(int32_t blocks, int32_t block_size, int32_t seq_slots, int32_t checkpoint_slots, int64_t ctx = 1024)
      : cache_({kv::LayerShape{1, 0}}, blocks, block_size), states_({3}, seq_slots, checkpoint_slots), ctx_(ctx) {
    cache_.pool().set_evict_listener([this](uint64_t key) { states_.drop(key); });
  }
  const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> seqs,
                                 std::span<const int64_t> logit_rows) override {
    all_.assign(ids.size() * kVocab, 0.f);
    std::set<int32_t> slots;
    for (const auto& s : seqs) {
      EXPECT_GE(s.state_slot, 0);
      EXPECT_TRUE(slots.insert(s.state_slot).second) << "two sequences share state slot " << s.state_slot;
      const int64_t start = s.context_len - s.num_tokens;
      float* st = states_.cache().at(0, s.state_slot);
      Hash h;
      if (start > 0) {
        h = {static_cast<int64_t>(st[0]), static_cast<int64_t>(st[1]), static_cast<int64_t>(st[2])};
        if (h.n != start) ++state_mismatches;  // the slot holds the state of another position
      }
      for (int64_t j = 0; j < s.num_tokens; ++j) {
        EXPECT_EQ(positions[s.first_token + j], start + j);
        cache_.k(0)[s.slots[start + j]] = static_cast<float>(ids[s.first_token + j]);
        h.add(ids[s.first_token + j]);
        auto row = logits_of(h);
        std::copy(row.begin(), row.end(), all_.begin() + (s.first_token + j) * kVocab);
      }
      st[0] = static_cast<float>(h.a), st[1] = static_cast<float>(h.b), st[2] = static_cast<float>(h.n);
      chunk_ends.insert(s.context_len);
    }
    max_batch_seqs = std::max<int64_t>(max_batch_seqs, static_cast<int64_t>(seqs.size()));
    logits_.clear();
    for (int64_t r : logit_rows) logits_.insert(logits_.end(), all_.begin() + r * kVocab, all_.begin() + (r + 1) * kVocab);
    const int64_t shape[3] = {1, static_cast<int64_t>(logit_rows.size()), kVocab};
    out_ = runtime::Tensor::contiguous_view(logits_.data(), runtime::DType::f32, shape);
    return out_;
  }
  kv::PagedKvCache& kv_cache() override { return cache_; }
  kv::StatePool* state_pool() override { return &states_; }
  int64_t max_context() const override { return ctx_; }
  int64_t vocab_size() const override { return kVocab; }
  const std::vector<int64_t>& eos_token_ids() const override { return eos_; }

  int64_t state_mismatches = 0, max_batch_seqs = 0;
  std::set<int64_t> chunk_ends;

 private:
  kv::PagedKvCache cache_;
  kv::StatePool states_;
  int64_t ctx_;
  std::vector<int64_t> eos_;
  std::vector<float> all_, logits_;
  runtime::Tensor out_;
};

// The oracle: the request computed from scratch, one token at a time.
std::vector<int64_t> alone(const Request& r) {
  Sampler s(r.sampling);
  s.set_prompt(r.prompt_ids);
  Hash h;
  for (int64_t t : r.prompt_ids) h.add(t);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    const int64_t t = s.sample(logits_of(h)).token;
    out.push_back(t);
    h.add(t);
  }
  return out;
}

Request make_request(std::vector<int64_t> prompt, int64_t max_tokens, int64_t seed, float temperature = 0.f) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = static_cast<uint64_t>(seed) * 977 + 1;
  return r;
}

std::vector<int64_t> tokens(int64_t n, int64_t salt) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i * 7 + salt * 13 + i * i % 5) % kVocab);
  return v;
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

void run_until_idle(Engine& eng) {
  for (int i = 0; i < 100000 && eng.step(); ++i) {
  }
}

void expect_all_free(const Engine& eng) {
  const auto m = eng.metrics();
  ASSERT_TRUE(m.state.has_value());
  EXPECT_EQ(m.state->seq_used, 0);
  EXPECT_EQ(m.pool.used, 0);
  EXPECT_EQ(m.running, 0);
}

TEST(StatePool, SequenceSlotsAreBoundedAndFreedOnce) {
  kv::StatePool p({4, 2}, 2, 1);
  EXPECT_EQ(p.cache().num_slots(), 3);
  EXPECT_EQ(p.cache().bytes_per_slot(), 24);
  const int32_t a = p.allocate(), b = p.allocate();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(p.allocate(), -1);  // the checkpoint slot is not a sequence slot
  p.release(a);
  EXPECT_THROW(p.release(a), std::logic_error);
  EXPECT_EQ(p.num_free(), 1);
  { kv::StateLease l(p, p.allocate()); EXPECT_EQ(p.num_free(), 0); }
  EXPECT_EQ(p.num_free(), 1);
}

TEST(StatePool, CheckpointsRestoreTheDeepestAndEvictLeastRecentlyUsed) {
  kv::StatePool p({2}, 1, 2);
  const int32_t s = p.allocate();
  auto put = [&](float v, uint64_t key) {
    p.cache().at(0, s)[0] = v;
    p.store(key, s);
  };
  put(1, 101);
  put(2, 102);
  p.cache().at(0, s)[0] = 0;
  EXPECT_EQ(p.restore_deepest({101, 102, 103}, 3, s), 2);  // key 103 holds none: block 2 is deepest
  EXPECT_EQ(p.cache().at(0, s)[0], 2);
  EXPECT_EQ(p.restore_deepest({101, 102}, 1, s), 1);  // limited to the first block
  EXPECT_EQ(p.cache().at(0, s)[0], 1);
  put(3, 103);  // evicts 102, the least recently used (101 was just restored)
  EXPECT_TRUE(p.holds(101));
  EXPECT_FALSE(p.holds(102));
  EXPECT_TRUE(p.holds(103));
  p.drop(101);
  EXPECT_FALSE(p.holds(101));
  EXPECT_EQ(p.restore_deepest({101, 102}, 2, s), 0);
  const auto st = p.stats();
  EXPECT_EQ(st.checkpoints, 1);
  EXPECT_EQ(st.checkpoint_evictions, 1);
  EXPECT_EQ(st.checkpoint_hits, 2);
  EXPECT_EQ(st.seq_used, 1);
}

TEST(StatePool, NoCheckpointSlotsStoresNothing) {
  kv::StatePool p({2}, 1, 0);
  const int32_t s = p.allocate();
  p.store(7, s);
  EXPECT_FALSE(p.holds(7));
  EXPECT_EQ(p.restore_deepest({7}, 1, s), 0);
}

TEST(StatePool, CheckpointPositions) {
  EXPECT_EQ(kv::checkpoint_positions(220, 16), (std::vector<int64_t>{128, 192, 208}));
  EXPECT_EQ(kv::checkpoint_positions(200, 16), (std::vector<int64_t>{128, 192}));  // 192 twice
  EXPECT_EQ(kv::checkpoint_positions(33, 16), (std::vector<int64_t>{32}));
  EXPECT_EQ(kv::checkpoint_positions(17, 16), (std::vector<int64_t>{16}));
  EXPECT_TRUE(kv::checkpoint_positions(16, 16).empty());  // the one block always leaves a token
  EXPECT_EQ(kv::checkpoint_positions(1000, 4, 2), (std::vector<int64_t>{992, 996}));
}

TEST(StatefulPoolSizing, BytesHoldSequenceSlotsThenCheckpointsThenBlocks) {
  kv::PoolSizing s{/*bytes=*/1000000, 0, /*max_seqs=*/4};
  // 10000-byte slots, 100 bytes per token, 16-token blocks (1600 bytes).
  const auto p = kv::stateful_pool(s, 100, 10000, 12, 4096, 16, 0);
  EXPECT_EQ(p.seq_slots, 4);
  EXPECT_EQ(p.checkpoint_slots, 12);  // a quarter of (1e6 - 4e4 - 1600) is 239600: 23 slots, 12 asked
  EXPECT_EQ(p.blocks, (1000000 - 16 * 10000) / 1600);
  EXPECT_LE(int64_t{p.blocks} * 1600 + (p.seq_slots + p.checkpoint_slots) * 10000, s.bytes);
  // Too small for the sequences' state and one block: refused, naming the sizes.
  try {
    kv::stateful_pool({41000, 0, 4}, 100, 10000, 12, 4096, 16, 0);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("40000 bytes"), std::string::npos) << e.what();
  }
  // No attention: the blocks cost nothing (max_seqs contexts); the rest goes to checkpoints.
  const auto pure = kv::stateful_pool({1000000, 0, 4}, 0, 10000, 200, 4096, 16, 0);
  EXPECT_EQ(pure.blocks, 4 * 4096 / 16);
  EXPECT_EQ(pure.checkpoint_slots, (1000000 - 40000) / 10000);
  // By default: bounded by the share of what is available.
  const auto def = kv::stateful_pool({0, 0, 2}, 100, 10000, 6, 4096, 16, 10000000);
  EXPECT_EQ(def.seq_slots, 2);
  EXPECT_EQ(def.checkpoint_slots, 6);
  EXPECT_LE(int64_t{def.blocks} * 1600 + 8 * 10000, 2000000 + 1600);
}

TEST(EngineState, BatchedChunkedAndPreemptedStreamsEqualEachAlone) {
  // 3 state slots for 8 runnable sequences: admission waits for slots; 16 blocks of 4 tokens is
  // less than the requests need together, so sequences are preempted and recomputed from zeros.
  StatefulBackend be(16, 4, 3, 6);
  Engine eng(be, nullptr, EngineOptions{8, 16, 100, true});
  std::vector<Request> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i) {
    reqs.push_back(make_request(tokens(3 + (i * 11) % 41, i), 6 + i % 9, i, i % 2 ? 0.8f : 0.f));
    streams.push_back(eng.submit(reqs.back()));
  }
  for (int i = 0; i < 100000 && eng.step(); ++i) {
    const auto m = eng.metrics();  // a waiting sequence (preempted too) holds no slot
    ASSERT_EQ(m.state->seq_used, m.running) << "step " << i;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto c = drain(*streams[i]);
    EXPECT_EQ(c.tokens, alone(reqs[i])) << "request " << i;
    EXPECT_EQ(c.last.finish_reason, FinishReason::length);
  }
  EXPECT_EQ(be.state_mismatches, 0);
  EXPECT_LE(be.max_batch_seqs, 3);  // never more running than state slots
  EXPECT_GT(eng.metrics().preemptions, 0);
  expect_all_free(eng);
}

TEST(EngineState, SharedPrefixResumesFromTheDeepestCheckpoint) {
  StatefulBackend be(200, 16, 4, 12);
  Engine eng(be, nullptr, EngineOptions{4, 512, 100, true});
  const auto prefix = tokens(200, 3);
  auto first = prefix, second = prefix;
  for (int64_t t : tokens(20, 5)) first.push_back(t);
  for (int64_t t : tokens(9, 8)) second.push_back(t);
  const Request a = make_request(first, 5, 1), b = make_request(second, 7, 2);
  auto sa = eng.submit(a);
  run_until_idle(eng);
  // The first prompt's chunks end at its checkpoint positions (128, 192, 208 of 220 tokens).
  for (int64_t p : {128, 192, 208}) EXPECT_TRUE(be.chunk_ends.contains(p)) << p;
  auto sb = eng.submit(b);
  run_until_idle(eng);
  const auto ca = drain(*sa), cb = drain(*sb);
  EXPECT_EQ(ca.tokens, alone(a));
  EXPECT_EQ(cb.tokens, alone(b));
  EXPECT_EQ(ca.last.cached_tokens, 0);
  EXPECT_EQ(cb.last.cached_tokens, 192);  // 12 shared blocks, the checkpoint at 192
  EXPECT_EQ(be.state_mismatches, 0);
  EXPECT_EQ(eng.metrics().state->checkpoint_hits, 1);
  expect_all_free(eng);
}

TEST(EngineState, WithoutCheckpointsCachedKvIsNeverUsed) {
  StatefulBackend be(200, 16, 4, 0);
  Engine eng(be, nullptr, EngineOptions{4, 512, 100, true});
  const auto prompt = tokens(100, 4);
  const Request a = make_request(prompt, 4, 1), b = make_request(prompt, 6, 2);
  auto sa = eng.submit(a);
  run_until_idle(eng);
  auto sb = eng.submit(b);
  run_until_idle(eng);
  EXPECT_EQ(drain(*sa).tokens, alone(a));
  const auto cb = drain(*sb);
  EXPECT_EQ(cb.tokens, alone(b));
  EXPECT_EQ(cb.last.cached_tokens, 0);  // the KV blocks are cached, but no state goes with them
  EXPECT_EQ(be.state_mismatches, 0);
  expect_all_free(eng);
}

TEST(EngineState, ChoicesSharingAPromptEachGetTheCheckpointedState) {
  StatefulBackend be(100, 8, 4, 12);
  Engine eng(be, nullptr, EngineOptions{4, 64, 100, true});
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(make_request(tokens(45, 9), 8, i + 1, 0.9f));
  auto streams = eng.submit_group(reqs);
  run_until_idle(eng);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(drain(*streams[i]).tokens, alone(reqs[i])) << "choice " << i;
  EXPECT_EQ(eng.metrics().shared_prompt_tokens, 2 * 40);  // the checkpoint at 40 of 45 tokens
  EXPECT_EQ(be.state_mismatches, 0);
  expect_all_free(eng);
}

TEST(EngineState, AbortFreesTheStateSlot) {
  StatefulBackend be(100, 8, 2, 4);
  Engine eng(be, nullptr, EngineOptions{4, 16, 100, true});
  auto s = eng.submit(make_request(tokens(40, 1), 50, 1));
  auto waiting = eng.submit(make_request(tokens(30, 2), 50, 2));
  auto third = eng.submit(make_request(tokens(20, 3), 50, 3));  // waits: two slots
  for (int i = 0; i < 6; ++i) eng.step();
  auto m = eng.metrics();
  EXPECT_EQ(m.state->seq_used, 2);
  EXPECT_EQ(m.running, 2);
  EXPECT_EQ(m.waiting, 1);
  s->cancel();
  eng.step();  // the aborted one's slot goes to the waiting one
  m = eng.metrics();
  EXPECT_EQ(m.requests_aborted, 1);
  EXPECT_EQ(m.running, 2);
  EXPECT_EQ(m.state->seq_used, 2);
  waiting->cancel();
  third->cancel();
  eng.step();
  expect_all_free(eng);
  const std::string text = to_prometheus(eng.metrics(), "m");
  EXPECT_NE(text.find("fuselm:state_slots_used{model_name=\"m\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fuselm:state_slots_total{model_name=\"m\"} 6\n"), std::string::npos);
  EXPECT_NE(text.find("fuselm:state_slot_bytes{model_name=\"m\"} 12\n"), std::string::npos);
}

TEST(EngineState, ShutdownFreesEveryStateSlot) {
  StatefulBackend be(100, 8, 2, 4);
  Engine eng(be, nullptr, EngineOptions{4, 16, 100, true});
  auto a = eng.submit(make_request(tokens(40, 1), 50, 1));
  auto b = eng.submit(make_request(tokens(30, 2), 50, 2));
  for (int i = 0; i < 4; ++i) eng.step();
  EXPECT_EQ(eng.metrics().state->seq_used, 2);
  eng.shutdown(true);
  expect_all_free(eng);
  EXPECT_EQ(drain(*a).last.finish_reason, FinishReason::abort);
}

}  // namespace engine_state_test
}  // namespace fuselm::engine
