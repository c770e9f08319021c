// attention over a q8_0 KV cache (--kv-cache-dtype q8_0) on every ISA path: the rows the kernel
// writes are, byte for byte, kernels_testing.h's transcription of ggml's quantize_row_q8_0_ref (each head
// padded with zeros to whole 32-blocks), and the output equals a double-precision softmax attention
// over the values those blocks hold (fp16 scale × int8), for head sizes 64, 80 (not a whole number
// of blocks) and 128, wide heads (> 256), context lengths that fill no 64-key chunk, decode with key
// segments, prefill token blocks, and a serving batch.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dtype.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_attention_q8_test {

using testing::dequantize_q8_0;
using testing::kQ8BlockBytes;
using testing::q8_0_blocks;
using testing::quantize_q8_0_padded;
using testing::random_floats;

struct Q8Case {
  int64_t hq, hkv, dqk, dv, ctx, t;
  int threads = 1;
  std::string name() const {
    return fmt::format("hq{}_hkv{}_dqk{}_dv{}_ctx{}_t{}_threads{}", hq, hkv, dqk, dv, ctx, t, threads);
  }
};

// One sequence: its slots, a q8_0 cache holding its context before the new tokens, the new q/k/v.
struct Q8Sequence {
  Q8Case c;
  int64_t num_slots = 0, k_row = 0, v_row = 0;  // row bytes
  std::vector<int32_t> slots;
  std::vector<uint8_t> k_cache, v_cache;
  std::vector<float> k_all, v_all, q;  // [ctx, hkv, d] and [t, hq, dqk]

  Q8Sequence(const Q8Case& cs, uint32_t seed) : c(cs) {
    num_slots = c.ctx + 9;
    k_row = c.hkv * q8_0_blocks(c.dqk) * kQ8BlockBytes, v_row = c.hkv * q8_0_blocks(c.dv) * kQ8BlockBytes;
    std::vector<int32_t> perm(static_cast<size_t>(num_slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    slots.assign(perm.begin(), perm.begin() + c.ctx);
    k_cache.assign(static_cast<size_t>(num_slots * k_row), 0xff);  // unused slots: garbage bytes
    v_cache.assign(static_cast<size_t>(num_slots * v_row), 0xff);
    k_all = random_floats(static_cast<size_t>(c.ctx * c.hkv * c.dqk), seed + 1, 2.f);
    v_all = random_floats(static_cast<size_t>(c.ctx * c.hkv * c.dv), seed + 2);
    q = random_floats(static_cast<size_t>(c.t * c.hq * c.dqk), seed + 3, 1.5f);
    for (int64_t j = 0; j < c.ctx - c.t; ++j) write_expected(j, k_cache.data(), v_cache.data());
  }

  // Context position j quantized as the kernel must write it, into caches k/v.
  void write_expected(int64_t j, uint8_t* k, uint8_t* v) const {
    for (int64_t h = 0; h < c.hkv; ++h) {
      quantize_q8_0_padded(&k_all[(j * c.hkv + h) * c.dqk], c.dqk,
                           k + slots[j] * k_row + h * q8_0_blocks(c.dqk) * kQ8BlockBytes);
      quantize_q8_0_padded(&v_all[(j * c.hkv + h) * c.dv], c.dv,
                           v + slots[j] * v_row + h * q8_0_blocks(c.dv) * kQ8BlockBytes);
    }
  }

  AttentionArgs args(float* out) {
    AttentionArgs a;
    a.cache_q8_0 = true;
    a.k_cache = k_cache.data(), a.v_cache = v_cache.data(), a.num_slots = num_slots;
    a.slots = slots.data(), a.ctx_len = c.ctx, a.t = c.t, a.q = q.data();
    a.k = k_all.data() + (c.ctx - c.t) * c.hkv * c.dqk, a.v = v_all.data() + (c.ctx - c.t) * c.hkv * c.dv;
    a.out = out;
    a.hq = c.hq, a.hkv = c.hkv, a.dqk = c.dqk, a.dv = c.dv;
    a.scale = 1.f / std::sqrt(static_cast<float>(c.dqk));
    return a;
  }

  // Double-precision causal softmax attention over the values the expected blocks hold.
  std::vector<double> reference() const {
    std::vector<uint8_t> k(k_cache.size()), v(v_cache.size());
    for (int64_t j = 0; j < c.ctx; ++j) write_expected(j, k.data(), v.data());
    std::vector<double> out(static_cast<size_t>(c.t * c.hq * c.dv), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(c.dqk)));
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t h = 0; h < c.hq; ++h) {
        const int64_t g = h / (c.hq / c.hkv), pos = c.ctx - c.t + i;
        std::vector<double> s(static_cast<size_t>(pos + 1));
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j <= pos; ++j) {
          const auto kj = dequantize_q8_0(k.data() + slots[j] * k_row + g * q8_0_blocks(c.dqk) * kQ8BlockBytes, c.dqk);
          double dot = 0;
          for (int64_t d = 0; d < c.dqk; ++d) dot += static_cast<double>(q[(i * c.hq + h) * c.dqk + d]) * kj[d];
          s[j] = dot * static_cast<float>(scale);
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        double* o = &out[(i * c.hq + h) * c.dv];
        for (int64_t j = 0; j <= pos; ++j) {
          const auto vj = dequantize_q8_0(v.data() + slots[j] * v_row + g * q8_0_blocks(c.dv) * kQ8BlockBytes, c.dv);
          for (int64_t d = 0; d < c.dv; ++d) o[d] += s[j] / sum * vj[d];
        }
      }
    return out;
  }

  // The new tokens' rows in the cache equal the expected blocks, byte for byte.
  void expect_new_rows_written() const {
    std::vector<uint8_t> k(k_cache.size()), v(v_cache.size());
    for (int64_t j = c.ctx - c.t; j < c.ctx; ++j) {
      write_expected(j, k.data(), v.data());
      ASSERT_EQ(0, std::memcmp(&k[slots[j] * k_row], &k_cache[slots[j] * k_row], k_row)) << "K of position " << j;
      ASSERT_EQ(0, std::memcmp(&v[slots[j] * v_row], &v_cache[slots[j] * v_row], v_row)) << "V of position " << j;
    }
  }
};

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << i;
}

class KernelsAttentionQ8 : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsAttentionQ8, EqualsDoubleAttentionOverTheBlocksItWrites) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const Q8Case cases[] = {
      {4, 2, 64, 64, 37, 1},              // decode, context short of one 64-key chunk
      {4, 2, 80, 80, 300, 1, 2},          // head of 2.5 blocks; key segments over two threads
      {6, 2, 128, 128, 130, 20},          // prefill token blocks
      {6, 2, 80, 64, 75, 11, 2},          // prefill over two threads, a last token block of 3
      {8, 1, 80, 128, 1, 1},              // the first token
      {4, 4, 64, 128, 700, 3, 2},         // MHA, several new tokens over a long context
      {2, 1, 320, 48, 70, 2},             // a head wider than 256: plain dot products
      {16, 2, 64, 64, 203, 1},            // decode, groups of 8: one p·V pass, keys in pairs, a tail
      {14, 2, 64, 64, 1100, 1, 2},        // groups of 7 (an odd one out), key segments
  };
  uint32_t seed = 71;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    testing::ScopedThreads threads(c.threads);
    Q8Sequence s(c, seed += 10);
    std::vector<float> out(static_cast<size_t>(c.t * c.hq * c.dv), std::numeric_limits<float>::quiet_NaN());
    attention(s.args(out.data()));
    s.expect_new_rows_written();
    expect_near(out, s.reference());
  }
}

// A serving batch (one work list over the sequences) equals each sequence's reference.
TEST_P(KernelsAttentionQ8, BatchEqualsTheReferencePerSequence) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  testing::ScopedThreads threads(2);
  std::vector<Q8Sequence> seqs;
  for (int64_t i = 0; i < 9; ++i) seqs.emplace_back(Q8Case{4, 2, 80, 80, 20 + 13 * i, i % 3 == 0 ? 5 : 1}, 500 + i);
  std::vector<std::vector<float>> outs;
  std::vector<AttentionArgs> batch;
  for (auto& s : seqs) outs.emplace_back(static_cast<size_t>(s.c.t * s.c.hq * s.c.dv));
  for (size_t i = 0; i < seqs.size(); ++i) batch.push_back(seqs[i].args(outs[i].data()));
  attention_batch(batch);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE(seqs[i].c.name());
    seqs[i].expect_new_rows_written();
    expect_near(outs[i], seqs[i].reference());
  }
  batch[1].cache_q8_0 = false;  // the sequences of a batch share one cache dtype
  EXPECT_THROW(attention_batch(batch), std::invalid_argument);
}

TEST(KernelsAttentionQ8Args, ACacheIsBf16OrQ8NotBoth) {
  Q8Sequence s(Q8Case{2, 1, 64, 64, 4, 1}, 3);
  std::vector<float> out(128);
  AttentionArgs a = s.args(out.data());
  a.cache_bf16 = true;
  EXPECT_THROW(attention(a), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(, KernelsAttentionQ8, ::testing::ValuesIn(testing::all_isas()), testing::isa_param_name);

}  // namespace kernels_attention_q8_test
}  // namespace fuselm::kernels
