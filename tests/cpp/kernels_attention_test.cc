// attention over a slot-paged KV cache against a double-precision transcription of transformers'
// eager_attention_forward (scaling, softcap, causal + sliding-window mask, sinks, GQA) and of an
// ALiBi bias slope[h] · (key - query position) added to the scores (bloom's baddbmm), on every ISA path.
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dtype.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_attention_test {

using testing::random_floats;

struct AttnCase {
  int64_t hq, hkv, dqk, dv, ctx, t;
  int64_t window = 0;
  float softcap = 0;
  bool sinks = false;
  float scale = 0;           // 0: dqk^-0.5
  int64_t head_pad = 0;      // extra floats between heads of q, k, v (views)
  bool kv_in_cache = false;  // k = v = nullptr: the caller already wrote them
  int threads = 0;
  int64_t chunk = 0;  // chunked mask: keys of the query's own chunk of this many positions
  bool alibi = false;  // per-head ALiBi slopes
  std::string name() const {
    return fmt::format("hq{}_hkv{}_dqk{}_dv{}_ctx{}_t{}{}{}{}{}{}{}{}{}", hq, hkv, dqk, dv, ctx, t, alibi ? "_alibi" : "",
                       window ? fmt::format("_win{}", window) : "", chunk ? fmt::format("_chunk{}", chunk) : "",
                       softcap ? fmt::format("_cap{}", softcap) : "", sinks ? "_sinks" : "",
                       head_pad ? "_strided" : "", kv_in_cache ? "_cached" : "",
                       threads ? fmt::format("_t{}", threads) : "");
  }
};

void check_attention(const AttnCase& c, uint32_t seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t num_slots = c.ctx + 13;
  const int64_t k_row = c.hkv * c.dqk, v_row = c.hkv * c.dv;
  // context positions live in a random permutation of slots; unused slots hold NaN
  std::vector<int32_t> perm(static_cast<size_t>(num_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<int32_t> slots(perm.begin(), perm.begin() + c.ctx);
  std::vector<float> k_cache(static_cast<size_t>(num_slots * k_row), nan);
  std::vector<float> v_cache(static_cast<size_t>(num_slots * v_row), nan);
  // full K/V of the context: [ctx, hkv, d]
  const auto k_all = random_floats(static_cast<size_t>(c.ctx * k_row), seed + 1);
  const auto v_all = random_floats(static_cast<size_t>(c.ctx * v_row), seed + 2);
  const int64_t first = c.ctx - c.t;
  const int64_t cached_until = c.kv_in_cache ? c.ctx : first;
  for (int64_t j = 0; j < cached_until; ++j) {
    std::copy_n(k_all.begin() + j * k_row, k_row, k_cache.begin() + slots[j] * k_row);
    std::copy_n(v_all.begin() + j * v_row, v_row, v_cache.begin() + slots[j] * v_row);
  }
  // new tokens in one fused, strided buffer per token: [q heads | k heads | v heads | pad]
  const int64_t qh = c.dqk + c.head_pad, kh = c.dqk + c.head_pad, vh = c.dv + c.head_pad;
  const int64_t width = c.hq * qh + c.hkv * kh + c.hkv * vh + 3;
  auto qkv = random_floats(static_cast<size_t>(c.t * width), seed + 3, 1.5f);
  for (int64_t i = 0; i < c.t; ++i)
    for (int64_t h = 0; h < c.hkv; ++h) {
      for (int64_t d = 0; d < c.dqk; ++d)
        qkv[i * width + c.hq * qh + h * kh + d] = k_all[(first + i) * k_row + h * c.dqk + d];
      for (int64_t d = 0; d < c.dv; ++d)
        qkv[i * width + c.hq * qh + c.hkv * kh + h * vh + d] =
            v_all[(first + i) * v_row + h * c.dv + d];
    }
  auto sinks = random_floats(static_cast<size_t>(c.hq), seed + 4, 2.f);
  if (c.sinks) sinks[0] = 30.f;  // a sink that takes nearly all the mass
  // ALiBi slopes as bloom's geometric series 2^(-8(h+1)/hq), one head with a steep slope
  std::vector<float> slopes(static_cast<size_t>(c.hq));
  for (int64_t h = 0; h < c.hq; ++h) slopes[h] = std::exp2(-8.f * static_cast<float>(h + 1) / static_cast<float>(c.hq));
  slopes[0] = 0.75f;
  const float scale = c.scale ? c.scale : 1.f / std::sqrt(static_cast<float>(c.dqk));
  std::vector<float> out(static_cast<size_t>(c.t * c.hq * c.dv), nan);

  AttentionArgs a;
  a.k_cache = k_cache.data();
  a.v_cache = v_cache.data();
  a.num_slots = num_slots;
  a.slots = slots.data();
  a.ctx_len = c.ctx;
  a.t = c.t;
  a.q = qkv.data();
  a.q_token_stride = width;
  a.q_head_stride = qh;
  if (!c.kv_in_cache) {
    a.k = qkv.data() + c.hq * qh;
    a.k_token_stride = width;
    a.k_head_stride = kh;
    a.v = qkv.data() + c.hq * qh + c.hkv * kh;
    a.v_token_stride = width;
    a.v_head_stride = vh;
  }
  a.out = out.data();
  a.hq = c.hq, a.hkv = c.hkv, a.dqk = c.dqk, a.dv = c.dv;
  a.scale = scale;
  a.sliding_window = c.window;
  a.chunk_size = c.chunk;
  a.softcap = c.softcap;
  a.sinks = c.sinks ? sinks.data() : nullptr;
  a.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  {
    std::optional<testing::ScopedThreads> threads;
    if (c.threads) threads.emplace(c.threads);
    attention(a);
  }

  // the cache now holds every context row at its slot, and unused slots are untouched
  for (int64_t j = 0; j < c.ctx; ++j) {
    for (int64_t e = 0; e < k_row; ++e)
      ASSERT_EQ(k_cache[slots[j] * k_row + e], k_all[j * k_row + e]) << c.name() << " K pos " << j;
    for (int64_t e = 0; e < v_row; ++e)
      ASSERT_EQ(v_cache[slots[j] * v_row + e], v_all[j * v_row + e]) << c.name() << " V pos " << j;
  }
  for (int64_t s = c.ctx; s < num_slots; ++s)
    ASSERT_TRUE(std::isnan(k_cache[perm[s] * k_row]) && std::isnan(v_cache[perm[s] * v_row]));

  // eager attention in double
  int bad = 0;
  const int64_t group = c.hq / c.hkv;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < c.t; ++i) {
    const int64_t p = first + i;
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t g = h / group;
      std::vector<double> logits(static_cast<size_t>(c.ctx));
      double mx = c.sinks ? sinks[h] : -inf;
      for (int64_t j = 0; j < c.ctx; ++j) {
        double s = 0;
        for (int64_t d = 0; d < c.dqk; ++d)
          s += static_cast<double>(qkv[i * width + h * qh + d]) * k_all[j * k_row + g * c.dqk + d];
        s *= scale;
        if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
        // ALiBi: the key-position form slope·j (bloom), equal under the softmax to the kernel's distance
        // form slope·(j - p); with a sink (a logit without the bias) only the distance form is the kernel's
        if (c.alibi) s += static_cast<double>(slopes[h]) * static_cast<double>(c.sinks ? j - p : j);
        const bool masked = j > p || (c.window > 0 && j <= p - c.window) || (c.chunk > 0 && j / c.chunk != p / c.chunk);
        logits[j] = masked ? -inf : s;
        mx = std::max(mx, logits[j]);
      }
      double denom = c.sinks ? std::exp(sinks[h] - mx) : 0.0;
      for (double& s : logits) denom += (s = std::exp(s - mx));
      for (int64_t d = 0; d < c.dv; ++d) {
        double ref = 0;
        for (int64_t j = 0; j < c.ctx; ++j) ref += logits[j] * v_all[j * v_row + g * c.dv + d];
        ref /= denom;
        const double got = out[(i * c.hq + h) * c.dv + d];
        if (!(std::fabs(got - ref) <= 2e-5 + 1e-4 * std::fabs(ref)) && bad++ < 5)
          ADD_FAILURE() << c.name() << " out[" << i << "," << h << "," << d << "] = " << got
                        << ", want " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0) << c.name();
}

std::vector<AttnCase> attention_cases() {
  std::vector<AttnCase> v;
  // decode: one new token over a context longer than a chunk (64 keys)
  v.push_back({9, 3, 64, 64, 150, 1});
  v.push_back({4, 1, 32, 32, 1, 1});  // first token, MQA
  v.push_back({4, 4, 16, 16, 70, 1, 0, 0, true});
  // prefill (t = ctx) and chunked prefill (t < ctx), odd head sizes, Dv != Dqk
  v.push_back({6, 2, 24, 40, 37, 37});
  v.push_back({6, 3, 17, 9, 100, 23});
  v.push_back({2, 1, 5, 70, 66, 66});
  // sliding window: smaller than, equal to and larger than the context
  v.push_back({4, 2, 16, 16, 100, 30, 5});
  v.push_back({4, 2, 16, 16, 40, 40, 1});
  v.push_back({4, 2, 16, 16, 20, 3, 64});
  // softcap, with a large scale so that it bites
  v.push_back({4, 2, 32, 32, 80, 80, 0, 5.f, false, 1.f});
  v.push_back({8, 4, 32, 16, 90, 7, 16, 50.f});
  // chunked masks: prefill across chunk boundaries, decode at and after a boundary, with a window
  for (AttnCase c : {AttnCase{4, 2, 16, 16, 100, 100}, AttnCase{4, 2, 16, 16, 64, 1}, AttnCase{4, 2, 16, 16, 65, 1},
                     AttnCase{6, 3, 16, 8, 90, 17, 7}}) {
    c.chunk = 16;
    v.push_back(c);
  }
  // sinks (gpt_oss), with a window and GQA
  v.push_back({8, 2, 16, 16, 75, 75, 0, 0, true});
  v.push_back({8, 2, 16, 16, 75, 10, 8, 0, true});
  // views: heads not adjacent; K/V already in the cache; uneven thread splits
  v.push_back({6, 2, 24, 24, 50, 12, 0, 0, false, 0, 5});
  v.push_back({6, 2, 24, 24, 50, 12, 0, 0, false, 0, 0, true});
  v.push_back({5, 5, 8, 8, 33, 33, 0, 0, true, 0, 0, false, 3});
  // long-context decode, split into key segments across threads and merged
  v.push_back({8, 2, 32, 32, 1100, 1, 0, 0, true, 0, 0, false, 3});
  v.push_back({4, 1, 16, 24, 2000, 2, 700, 30.f, false, 0, 0, false, 2});
  v.push_back({6, 3, 16, 16, 1300, 1, 0, 0, false, 0, 0, true, 2});
  // a group wider than 64 q heads (MQA with many heads)
  v.push_back({80, 1, 8, 8, 20, 5});
  // prefill in blocks of tokens sharing each chunk's transposed K: SmolLM2's heads over several
  // chunks; on 1 thread a wide group (two head slices per block) and heads too wide to transpose
  v.push_back({9, 3, 64, 64, 200, 200});
  v.push_back({9, 3, 64, 64, 150, 131, 70});
  v.push_back({80, 1, 8, 8, 40, 40, 0, 0, false, 0, 0, false, 1});
  v.push_back({2, 1, 300, 16, 20, 19, 0, 0, false, 0, 0, false, 1});
  // ALiBi: prefill, chunked prefill, decode over several 64-key chunks and split key segments, with
  // GQA/MQA, a sliding window, softcap, sinks and a cache already holding K/V
  for (AttnCase c : {AttnCase{4, 4, 16, 16, 100, 100}, AttnCase{8, 2, 16, 16, 90, 17}, AttnCase{4, 1, 32, 32, 150, 1},
                     AttnCase{6, 3, 16, 16, 80, 80, 9}, AttnCase{4, 2, 32, 32, 70, 5, 0, 20.f, true, 1.f},
                     AttnCase{6, 2, 24, 24, 50, 12, 0, 0, false, 0, 0, true},
                     AttnCase{8, 2, 32, 32, 1100, 1, 0, 0, false, 0, 0, false, 3},
                     AttnCase{4, 1, 16, 24, 2000, 2, 700, 0, false, 0, 0, false, 2}}) {
    c.alibi = true;
    v.push_back(c);
  }
  return v;
}

class KernelsAttention : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsAttention, MatchesEagerAttention) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  uint32_t seed = 100;
  for (const AttnCase& c : attention_cases()) check_attention(c, seed += 7);
}

TEST_P(KernelsAttention, RejectsInconsistentArguments) {
  FUSELM_REQUIRE_ISA(GetParam());
  std::vector<float> kc(4 * 8), vc(4 * 8), q(8), k(8), v(8), out(8);
  std::vector<int32_t> slots = {0, 1};
  AttentionArgs a;
  a.k_cache = kc.data(), a.v_cache = vc.data(), a.num_slots = 4, a.slots = slots.data();
  a.ctx_len = 2, a.t = 1, a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data();
  a.hq = 1, a.hkv = 1, a.dqk = 8, a.dv = 8;
  EXPECT_NO_THROW(attention(a));
  AttentionArgs b = a;
  b.hq = 3, b.hkv = 2;
  EXPECT_THROW(attention(b), std::invalid_argument);  // hq not a multiple of hkv
  b = a;
  b.t = 3;
  EXPECT_THROW(attention(b), std::invalid_argument);  // more new tokens than context
  b = a;
  slots[0] = 4;
  EXPECT_THROW(attention(b), std::invalid_argument);  // slot out of range
  slots[0] = 0;
  b = a;
  b.v = nullptr;
  EXPECT_THROW(attention(b), std::invalid_argument);  // k without v
}

// MLA's latent cache: one KV head whose V is the first dv floats of each K row (v_cache = k_cache,
// both row strides = the row width). Same result as a dense cache holding those floats as V.
TEST_P(KernelsAttention, RowStridesLetVAliasKRows) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const int64_t hq = 5, dqk = 40, dv = 32, ctx = 70, t = 3, slots_n = 80;
  auto rows = random_floats(static_cast<size_t>(slots_n * dqk), 901);
  std::vector<float> dense_v(static_cast<size_t>(slots_n * dv));
  for (int64_t s = 0; s < slots_n; ++s)
    std::copy_n(rows.begin() + s * dqk, dv, dense_v.begin() + s * dv);
  std::vector<int32_t> slots(ctx);
  for (int64_t j = 0; j < ctx; ++j) slots[j] = static_cast<int32_t>((j * 37) % slots_n);  // scattered slots
  auto q = random_floats(static_cast<size_t>(t * hq * dqk), 902);
  std::vector<float> want(static_cast<size_t>(t * hq * dv)), got(want.size());
  AttentionArgs a;
  a.k_cache = rows.data(), a.v_cache = dense_v.data(), a.num_slots = slots_n, a.slots = slots.data();
  a.ctx_len = ctx, a.t = t, a.q = q.data(), a.out = want.data();
  a.hq = hq, a.hkv = 1, a.dqk = dqk, a.dv = dv, a.scale = 0.2f;
  attention(a);
  AttentionArgs b = a;
  b.v_cache = rows.data();
  b.k_row_stride = dqk, b.v_row_stride = dqk;
  b.out = got.data();
  attention(b);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1.f + std::fabs(want[i]))) << i;
  b.v_row_stride = dv - 1;  // narrower than a V row
  EXPECT_THROW(attention(b), std::invalid_argument);
}

// A serving step's batch: many sequences of one layer in one call (decodes and a prefill chunk,
// scattered slots of one shared cache) give what attention() gives for each on its own, and write
// the same cache rows.
TEST_P(KernelsAttention, BatchOfSequencesEqualsEachAlone) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  testing::ScopedThreads threads(2);
  const int64_t hq = 6, hkv = 2, d = 32, n_seq = 12, slots_n = 2048;
  std::vector<int32_t> perm(slots_n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(77));
  auto cache_k = random_floats(static_cast<size_t>(slots_n * hkv * d), 910);
  auto cache_v = random_floats(static_cast<size_t>(slots_n * hkv * d), 911);
  auto k2 = cache_k, v2 = cache_v;
  std::vector<std::vector<float>> q, k, v, want, got;
  std::vector<AttentionArgs> alone, batch;
  int64_t next_slot = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const int64_t ctx = 40 + 13 * s, t = s == 5 ? 19 : s == 8 ? 7 : 1;  // blocks of 8 tokens: 8 + 8 + 3, and 7
    const int32_t* slots = perm.data() + next_slot;
    next_slot += ctx;
    q.push_back(random_floats(static_cast<size_t>(t * hq * d), 920 + s));
    k.push_back(random_floats(static_cast<size_t>(t * hkv * d), 940 + s));
    v.push_back(random_floats(static_cast<size_t>(t * hkv * d), 960 + s));
    want.emplace_back(static_cast<size_t>(t * hq * d));
    got.emplace_back(static_cast<size_t>(t * hq * d));
    AttentionArgs a;
    a.k_cache = cache_k.data(), a.v_cache = cache_v.data(), a.num_slots = slots_n, a.slots = slots;
    a.ctx_len = ctx, a.t = t, a.q = q.back().data(), a.k = k.back().data(), a.v = v.back().data();
    a.hq = hq, a.hkv = hkv, a.dqk = d, a.dv = d, a.scale = 0.17f, a.sliding_window = 64;
    a.out = want.back().data();
    alone.push_back(a);
    a.k_cache = k2.data(), a.v_cache = v2.data(), a.out = got.back().data();
    batch.push_back(a);
  }
  for (const auto& a : alone) attention(a);
  attention_batch(batch);
  EXPECT_EQ(cache_k, k2);
  EXPECT_EQ(cache_v, v2);
  for (int64_t s = 0; s < n_seq; ++s)
    for (size_t i = 0; i < want[s].size(); ++i)
      ASSERT_NEAR(got[s][i], want[s][i], 1e-5f * (1.f + std::fabs(want[s][i]))) << "sequence " << s << " " << i;
  batch[3].hkv = 3, batch[3].hq = 6;  // head layouts must agree across the batch
  EXPECT_THROW(attention_batch(batch), std::invalid_argument);
}

// A bf16 cache (--kv-cache-dtype bf16): new rows are stored rounded to nearest even, and the result
// equals fp32 attention over a cache (and new K/V) holding exactly those rounded values; alone and
// in a batch.
// Shapes: heads too narrow for the decode kernel of small groups (attend_group_pairs), and decode
// through it: groups of 1, 3, 6, 7 and 8 heads (8: two p·V passes), Dqk != Dv, a context split into
// key segments over threads.
struct Bf16Case {
  int64_t hq, hkv, dqk, dv, ctx, t;
};

void check_bf16_cache(const Bf16Case& c) {
  const int64_t hq = c.hq, hkv = c.hkv, dqk = c.dqk, dv = c.dv, ctx = c.ctx, t = c.t, slots_n = ctx + 50;
  auto round = [](std::vector<float> x) {
    for (float& f : x) f = bf16_to_f32(f32_to_bf16(f));
    return x;
  };
  std::vector<int32_t> slots(ctx);
  for (int64_t j = 0; j < ctx; ++j) slots[j] = static_cast<int32_t>((j * 71 + 5) % slots_n);
  const auto k_ctx = random_floats(static_cast<size_t>(slots_n * hkv * dqk), 931);
  const auto v_ctx = random_floats(static_cast<size_t>(slots_n * hkv * dv), 932);
  std::vector<uint16_t> k16(k_ctx.size()), v16(v_ctx.size());
  for (size_t i = 0; i < k_ctx.size(); ++i) k16[i] = f32_to_bf16(k_ctx[i]);
  for (size_t i = 0; i < v_ctx.size(); ++i) v16[i] = f32_to_bf16(v_ctx[i]);
  auto k32 = round(k_ctx), v32 = round(v_ctx);
  const auto q = random_floats(static_cast<size_t>(t * hq * dqk), 933);
  const auto k_new = random_floats(static_cast<size_t>(t * hkv * dqk), 934);
  const auto v_new = random_floats(static_cast<size_t>(t * hkv * dv), 935);
  const auto k_new_r = round(k_new), v_new_r = round(v_new);
  std::vector<float> want(static_cast<size_t>(t * hq * dv)), got(want.size());
  AttentionArgs a;
  a.num_slots = slots_n, a.slots = slots.data(), a.ctx_len = ctx, a.t = t, a.q = q.data();
  a.hq = hq, a.hkv = hkv, a.dqk = dqk, a.dv = dv, a.scale = 0.15f, a.softcap = 20.f;
  AttentionArgs f = a;
  f.k_cache = k32.data(), f.v_cache = v32.data(), f.k = k_new_r.data(), f.v = v_new_r.data(), f.out = want.data();
  attention(f);
  AttentionArgs b = a;
  b.cache_bf16 = true;
  b.k_cache = k16.data(), b.v_cache = v16.data(), b.k = k_new.data(), b.v = v_new.data(), b.out = got.data();
  attention(b);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1.f + std::fabs(want[i]))) << i;
  for (int64_t i = 0; i < t; ++i)  // the new rows are in the cache, rounded
    for (int64_t e = 0; e < hkv * dqk; ++e)
      ASSERT_EQ(k16[slots[ctx - t + i] * hkv * dqk + e], f32_to_bf16(k_new[i * hkv * dqk + e]));
  // The same sequence many times in one batch (each its own output): every copy equals `want`.
  testing::ScopedThreads threads(2);
  std::vector<std::vector<float>> outs(8, std::vector<float>(want.size()));
  std::vector<AttentionArgs> batch;
  for (auto& o : outs) {
    AttentionArgs c = b;
    c.k = c.v = nullptr;  // the rows are in the cache already (written once above)
    c.out = o.data();
    batch.push_back(c);
  }
  attention_batch(batch);
  for (const auto& o : outs)
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(o[i], want[i], 1e-5f * (1.f + std::fabs(want[i]))) << i;
}

TEST_P(KernelsAttention, Bf16CacheEqualsF32OverTheRoundedRows) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (const Bf16Case& c : {Bf16Case{4, 2, 40, 24, 150, 3}, Bf16Case{9, 3, 64, 64, 300, 1}, Bf16Case{5, 5, 32, 32, 70, 2},
                            Bf16Case{12, 2, 128, 64, 100, 1}, Bf16Case{14, 2, 64, 64, 1100, 1},
                            Bf16Case{8, 1, 32, 96, 130, 1}}) {
    SCOPED_TRACE(fmt::format("hq{} hkv{} dqk{} dv{} ctx{} t{}", c.hq, c.hkv, c.dqk, c.dv, c.ctx, c.t));
    check_bf16_cache(c);
  }
}

INSTANTIATE_TEST_SUITE_P(, KernelsAttention, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace kernels_attention_test
}  // namespace fuselm::kernels
