// quant_linear on every ISA path against a plain dequantize-then-multiply reference in double, on
// random blocks and sizes that fill neither a vector register, a group of rows nor a thread share.
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_packed.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/tuning.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_quant_test {

using testing::random_floats;

// Byte offsets of the f16 scales in each block type (ggml-common.h).
std::vector<int> scale_offsets(QuantType t) {
  switch (t) {
    case QuantType::q4_1: case QuantType::q5_1: case QuantType::q4_k: case QuantType::q5_k: return {0, 2};
    case QuantType::q6_k: return {208};
    default: return {0};
  }
}

/// n rows of random blocks: random bytes (or all `fill`, 0..255), with finite random f16 scales of
/// either sign.
std::vector<unsigned char> random_blocks(QuantType t, int64_t n, int64_t k, int64_t pad, uint32_t seed, int fill = -1) {
  const QuantTypeInfo& info = quant_info(t);
  const int64_t ldw = quant_row_bytes(t, k) + pad;
  std::vector<unsigned char> w(static_cast<size_t>(n * ldw));
  std::mt19937 rng(seed);
  for (auto& b : w) b = static_cast<unsigned char>(fill >= 0 ? fill : rng());
  std::uniform_real_distribution<float> scale(-0.1f, 0.1f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < k / info.block_elems; ++b)
      for (int off : scale_offsets(t)) {
        const uint16_t hv = f32_to_f16(scale(rng));
        std::memcpy(&w[j * ldw + b * info.block_bytes + off], &hv, 2);
      }
  return w;
}

struct QuantCase {
  QuantType type;
  int64_t m, n, k;
  bool bias = false;
  int64_t pad = 0;  // extra elements (bytes for w) per row stride
  int threads = 0;
  bool packed = false;  // through QuantPacked / quant_linear_packed
  bool extreme = false;  // the largest codes (every code byte 0xFF, q8_0's -128) and |x| = 127
  std::string name() const {
    return fmt::format("{}_m{}_n{}_k{}{}{}{}{}{}", quant_info(type).name, m, n, k, bias ? "_bias" : "",
                       pad ? fmt::format("_pad{}", pad) : "", threads ? fmt::format("_t{}", threads) : "",
                       packed ? "_packed" : "", extreme ? "_extreme" : "");
  }
};

// Checks y against two references, both in double over the dequantized weights:
//  exact: x replaced by its Q8 quantization (what the kernel multiplies): |y - ref| <= 1e-5·Σ|w·x|
//  f32:   the f32 x itself: the activation rounding error is at most Σ_p |w_p|·d_x(p)/2.
void check_quant(const QuantCase& c, uint32_t seed) {
  // The packed kernels quantize activations per 32 whatever the weight block (quant_packed.h).
  const int64_t lda = c.k + c.pad, ldy = c.n + c.pad, block = c.packed ? 32 : quant_info(c.type).block_elems;
  const int64_t ldw = quant_row_bytes(c.type, c.k) + c.pad * 2;
  auto x = random_floats(static_cast<size_t>(c.m * lda), seed);
  if (c.extreme)  // every activation ±1: quantized to ±127, rows of either sign
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i / static_cast<size_t>(lda)) % 2 ? -1.f : 1.f;
  const auto w = random_blocks(c.type, c.n, c.k, c.pad * 2, seed + 1, c.extreme ? (c.type == QuantType::q8_0 ? 0x80 : 0xFF) : -1);
  const auto bias = random_floats(static_cast<size_t>(c.n), seed + 2);
  std::vector<float> wf(static_cast<size_t>(c.n * c.k));
  for (int64_t j = 0; j < c.n; ++j) dequantize_row(c.type, &w[j * ldw], &wf[j * c.k], c.k);
  std::vector<unsigned char> scratch(static_cast<size_t>(q8_acts_bytes(c.m, c.k, block)) + 64);
  const Q8Acts qa = quantize_acts(x.data(), lda, c.m, c.k, block, scratch.data());
  std::vector<float> y(static_cast<size_t>(c.m * ldy), -7.f);
  std::optional<testing::ScopedThreads> threads;
  if (c.threads) threads.emplace(c.threads);
  if (c.packed) {
    const QuantPacked pw = QuantPacked::pack(c.type, w.data(), ldw, c.n, c.k);
    quant_linear_packed(pw, x.data(), lda, c.bias ? bias.data() : nullptr, y.data(), ldy, c.m);
  } else {
    quant_linear({.x = x.data(), .lda = lda, .w = w.data(), .w_type = c.type, .ldw_bytes = ldw,
                  .bias = c.bias ? bias.data() : nullptr, .y = y.data(), .ldy = ldy, .m = c.m, .n = c.n, .k = c.k});
  }
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = c.bias ? bias[j] : 0.0, f32 = exact, l1 = std::fabs(exact), act_err = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double wv = wf[j * c.k + p], dx = qa.d[i * (c.k / block) + p / block];
        exact += wv * dx * qa.q[i * c.k + p];
        f32 += wv * x[i * lda + p];
        l1 += std::fabs(wv * x[i * lda + p]);
        act_err += std::fabs(wv) * dx * 0.5;
      }
      const double got = y[i * ldy + j];
      const bool ok = std::fabs(got - exact) <= 1e-5 * l1 + 1e-6 &&
                      std::fabs(got - f32) <= act_err * 1.001 + 1e-5 * l1 + 1e-6;
      if (!ok && bad++ < 5)
        ADD_FAILURE() << c.name() << " y[" << i << "," << j << "] = " << got << ", exact " << exact << ", f32 " << f32
                      << " (activation error bound " << act_err << ")";
    }
  }
  for (int64_t i = 0; i < c.m; ++i)  // the padding of y is untouched
    for (int64_t j = c.n; j < ldy; ++j) EXPECT_EQ(y[i * ldy + j], -7.f) << c.name();
}

std::vector<QuantCase> cases() {
  std::vector<QuantCase> out;
  for (QuantType t : kAllQuantTypes) {
    const int64_t b = quant_info(t).block_elems;
    out.push_back({t, 1, 1, b});
    out.push_back({t, 1, 7, 2 * b, true});
    out.push_back({t, 3, 5, 3 * b, false, 3});
    out.push_back({t, 5, 17, b, true, 0, 2});
    out.push_back({t, 9, 35, 2 * b, true, 1, 2});
    out.push_back({t, 1, 70, 4 * b, false, 0, 2});
    out.push_back({t, 4, 15, 5 * b, true});  // a full group of 4 rows of x, n one short of 16
  }
  return out;
}

class QuantLinearIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(QuantLinearIsa, MatchesDequantizedReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  uint32_t seed = 1;
  for (const QuantCase& c : cases()) check_quant(c, seed += 10);
}

// The 16-row packed layout: groups that 16 rows do not fill, one to nine rows of x.
TEST_P(QuantLinearIsa, PackedMatchesDequantizedReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  uint32_t seed = 7;
  for (QuantType t : kAllQuantTypes) {
    if (!QuantPacked::packable(t)) continue;
    // The K-quants' k: one to three whole super-blocks (256 each), by the case's 32-block count.
    const bool k_quant = quant_info(t).block_elems == 256;
    for (QuantCase c : std::vector<QuantCase>{{t, 1, 1, 32}, {t, 1, 16, 64, true}, {t, 2, 17, 96, false, 3},
                                              {t, 5, 40, 32, true, 0, 2}, {t, 9, 33, 128, true, 1, 2},
                                              {t, 1, 100, 256, false, 0, 2},
                                              // one lane short of a 16-row vector / two 8-row halves,
                                              // odd block counts, exactly 4 and 8 rows of x
                                              {t, 4, 15, 160}, {t, 8, 31, 224, true, 0, 2},
                                              // the amx path's 16-row tiles of x: exactly one,
                                              // two and a remainder, odd block counts, strides
                                              {t, 16, 16, 32}, {t, 16, 20, 96, true, 0, 2},
                                              {t, 37, 33, 160, true, 3, 2}, {t, 48, 17, 64, false, 0, 2},
                                              // the vnni path's gemm tile (6 rows x 2 groups): row
                                              // remainders 1..5, an odd group left, exactly two
                                              // groups, a thread share starting at an odd group
                                              {t, 6, 64, 64}, {t, 7, 49, 96, true, 0, 2}, {t, 11, 32, 64, true, 0, 2},
                                              {t, 3, 48, 32, true}, {t, 13, 80, 288, true, 2, 2},
                                              {t, 2, 1, 32, true}, {t, 21, 113, 64, false, 1, 2},
                                              // the avx2 path's tile (4 rows x one group, q6_k 2
                                              // rows): only the first half of a group, remainders
                                              {t, 10, 8, 64, true}, {t, 3, 24, 96}, {t, 6, 9, 32, false, 0, 2}}) {
      if (k_quant) c.k = 256 * ((c.k / 32 - 1) % 3 + 1);
      c.packed = true;
      check_quant(c, seed += 10);
    }
  }
}

// The largest codes against |x| = 127 in every block: the integer sums the kernels keep in int16
// (the avx2 prefill tile) or int32 stay exact; prefill and decode shapes.
TEST_P(QuantLinearIsa, PackedExtremeCodesDoNotOverflow) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  uint32_t seed = 3;
  for (QuantType t : kAllQuantTypes) {
    const int64_t k = quant_info(t).block_elems == 256 ? 512 : 96;
    for (QuantCase c : std::vector<QuantCase>{{t, 5, 24, k, true}, {t, 1, 16, k}, {t, 2, 9, k, false, 0, 2}}) {
      c.packed = c.extreme = true;
      check_quant(c, seed += 10);
      c.packed = false;  // and the row kernels on the raw blocks
      check_quant(c, seed += 10);
    }
  }
}

// On the avx2 path every row of a prefill is what that row alone gives (decode: packed_tile), bit
// for bit: the prefill tile's integer sums are exact and its fp32 operations per block the same.
TEST_P(QuantLinearIsa, PackedAvx2PrefillRowsEqualDecode) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  if (std::string(quant_kernel_path()) != "avx2") GTEST_SKIP() << "not the avx2 packed kernels";
  for (QuantType t : kAllQuantTypes) {
    const int64_t m = 7, n = 40, k = quant_info(t).block_elems == 256 ? 512 : 160;
    const auto x = random_floats(static_cast<size_t>(m * k), 41);
    const auto w = random_blocks(t, n, k, 0, 42);
    const auto bias = random_floats(static_cast<size_t>(n), 43);
    const QuantPacked pw = QuantPacked::pack(t, w.data(), 0, n, k);
    std::vector<float> y(static_cast<size_t>(m * n)), row(static_cast<size_t>(n));
    quant_linear_packed(pw, x.data(), 0, bias.data(), y.data(), 0, m);
    for (int64_t i = 0; i < m; ++i) {
      quant_linear_packed(pw, x.data() + i * k, 0, bias.data(), row.data(), 0, 1);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y[i * n + j], row[j]) << quant_info(t).name << " y[" << i << "," << j << "]";
    }
  }
}

// Decode (one row of x) on packed weights under each tuning table (the amd one prefetches codes
// ahead on the avx2 path, packed_tile_decode): against the reference, and the same bits under both.
// Groups that 16 rows do not fill (8: only the first half, 9, 15), several groups over threads,
// strides, one block and odd block counts.
TEST_P(QuantLinearIsa, PackedDecodeMatchesReferenceUnderEveryTuning) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  uint32_t seed = 61;
  for (QuantType t : kAllQuantTypes) {
    const int64_t b = quant_info(t).block_elems == 256 ? 256 : 32;
    for (QuantCase c : std::vector<QuantCase>{{t, 1, 8, b}, {t, 1, 9, 3 * b, true}, {t, 1, 15, 5 * b},
                                              {t, 1, 33, 2 * b, true, 1, 2}, {t, 1, 80, 3 * b, false, 0, 2}}) {
      c.packed = true;
      std::vector<std::vector<float>> ys;
      for (CpuVendor v : {CpuVendor::intel, CpuVendor::amd}) {
        ScopedCpuTuning tuning(tuning_for(v));
        check_quant(c, seed);
        const auto x = random_floats(static_cast<size_t>(c.k), seed + 5);
        const auto w = random_blocks(t, c.n, c.k, 0, seed + 6);
        const QuantPacked pw = QuantPacked::pack(t, w.data(), 0, c.n, c.k);
        ys.emplace_back(static_cast<size_t>(c.n));
        quant_linear_packed(pw, x.data(), 0, nullptr, ys.back().data(), 0, 1);
      }
      EXPECT_EQ(ys[0], ys[1]) << c.name() << ": the tunings differ in more than prefetching";
      seed += 10;
    }
  }
}

// quantize_acts gives the same bits on every path (the vnni and amx paths vectorize it): random
// rows, an all-zero block, exact ties (x·127/amax = n + 1/2), rows padded (lda > k), both blocks.
TEST_P(QuantLinearIsa, QuantizeActsSameBitsAsGeneric) {
  FUSELM_REQUIRE_ISA(GetParam());
  for (int64_t block : {int64_t{32}, int64_t{256}}) {
    const int64_t m = 5, k = 3 * block, lda = k + 7;
    auto x = random_floats(static_cast<size_t>(m * lda), 91 + static_cast<uint32_t>(block));
    for (int64_t j = 0; j < block; ++j) x[static_cast<size_t>(lda + j)] = 0.f;  // row 1, block 0: zeros
    for (int64_t j = 0; j < block; ++j)  // row 2, block 1: amax 127, values n + 1/2 (ties)
      x[static_cast<size_t>(2 * lda + block + j)] = j == 0 ? 127.f : static_cast<float>(j % 100) - 49.5f;
    const size_t bytes = static_cast<size_t>(q8_acts_bytes(m, k, block));
    std::vector<unsigned char> ref_buf(bytes + 64), got_buf(bytes + 64);
    Q8Acts ref{}, got{};
    {
      ScopedCpuIsa scoped(Isa::generic);
      ref = quantize_acts(x.data(), lda, m, k, block, ref_buf.data());
    }
    {
      ScopedCpuIsa scoped(GetParam());
      got = quantize_acts(x.data(), lda, m, k, block, got_buf.data());
    }
    EXPECT_EQ(std::memcmp(ref.q, got.q, static_cast<size_t>(m * k)), 0) << "block " << block;
    EXPECT_EQ(std::memcmp(ref.d, got.d, static_cast<size_t>(m * (k / block)) * 4), 0) << "block " << block;
    EXPECT_EQ(std::memcmp(ref.sum16, got.sum16, static_cast<size_t>(m * (k / 16)) * 2), 0) << "block " << block;
    EXPECT_EQ(std::memcmp(ref.dsum, got.dsum, static_cast<size_t>(m * (k / 32)) * 4), 0) << "block " << block;
    EXPECT_EQ(got.q[2 * k + block + 1], -48) << "the tie 1 - 49.5 = -48.5 rounds to even";
  }
}

// The word-at-a-time unpacking of a Q4_K/Q5_K block's 8 (scale, min) pairs equals ggml's
// get_scale_min_k4 (scale_min_k4) for every pair, on random bytes.
TEST(QuantBlocks, ScalesMinsAtOnceEqualOneByOne) {
  std::mt19937 rng(11);
  for (int t = 0; t < 20000; ++t) {
    uint8_t q[12];
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    uint8_t sc[8], mn[8];
    scales_mins_k4(q, sc, mn);
    for (int j = 0; j < 8; ++j) {
      uint8_t d, m;
      scale_min_k4(j, q, d, m);
      ASSERT_EQ(sc[j], d) << "pair " << j;
      ASSERT_EQ(mn[j], m) << "pair " << j;
    }
  }
}

TEST(QuantPacked, RejectsPartialBlocks) {
  std::vector<unsigned char> w(210);
  EXPECT_THROW(QuantPacked::pack(QuantType::q8_0, w.data(), 0, 1, 40), std::invalid_argument);
  EXPECT_THROW(QuantPacked::pack(QuantType::q6_k, w.data(), 0, 1, 96), std::invalid_argument);
}

TEST_P(QuantLinearIsa, KernelPathFollowsTheIsa) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa scoped(GetParam());
  // The level alone decides the path (its features, isa.h), so forcing a level covers its path.
  EXPECT_EQ(std::string(quant_kernel_path()), testing::quant_path_of(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantLinearIsa, ::testing::ValuesIn(testing::all_isas()), testing::isa_param_name);

TEST(QuantLinear, ZeroKGivesBias) {
  const std::vector<float> bias{1.f, 2.f};
  std::vector<float> y(2, -1.f);
  quant_linear({.x = nullptr, .w = nullptr, .w_type = QuantType::q4_0, .bias = bias.data(), .y = y.data(), .m = 1,
                .n = 2, .k = 0});
  EXPECT_EQ(y, bias);
}

TEST(QuantLinear, RejectsPartialBlocks) {
  std::vector<float> x(48), y(1);
  std::vector<unsigned char> w(64);
  try {
    quant_linear({.x = x.data(), .w = w.data(), .w_type = QuantType::q8_0, .y = y.data(), .m = 1, .n = 1, .k = 48});
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "quant_linear: k = 48 is not a multiple of the 32-element q8_0 block");
  }
  EXPECT_THROW(quantize_row(QuantType::q4_k, x.data(), w.data(), 256), std::invalid_argument);
}

// q8_0 rounds as ggml's reference (roundf: ties away from zero): a block whose scale is exactly 1
// (amax 127) puts x·(1/d) on exact ties, where rounding to even would differ.
TEST(QuantLinear, Q8_0RoundsTiesAwayFromZero) {
  std::vector<float> x = {127.f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f, -126.5f, 0.49999997f, -0.49999997f, 0.f};
  x.resize(32, 3.25f);
  std::vector<unsigned char> q(static_cast<size_t>(quant_row_bytes(QuantType::q8_0, 32)));
  quantize_row(QuantType::q8_0, x.data(), q.data(), 32);
  const auto* codes = reinterpret_cast<const int8_t*>(q.data() + 2);  // after the fp16 scale
  for (int j = 0; j < 32; ++j) EXPECT_EQ(codes[j], static_cast<int8_t>(std::roundf(x[j]))) << "x = " << x[j];
}

// The quantizers invert dequantization up to half a step per element.
TEST(QuantLinear, QuantizeRoundTrip) {
  const auto x = random_floats(256, 5);
  for (QuantType t : {QuantType::q8_0, QuantType::q4_0}) {
    std::vector<unsigned char> q(static_cast<size_t>(quant_row_bytes(t, 256)));
    std::vector<float> back(256);
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), back.data(), 256);
    for (int b = 0; b < 8; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
      const float step = t == QuantType::q8_0 ? amax / 127 : amax / 8;
      // q4_0 maps the largest magnitude to -8, so its opposite (+8) clips to 7: a whole step
      const float slack = t == QuantType::q8_0 ? 0.5f : 1.f;
      for (int j = 0; j < 32; ++j)
        EXPECT_LE(std::fabs(back[32 * b + j] - x[32 * b + j]), step * slack * 1.01f + 1e-3f * amax)
            << quant_info(t).name << " element " << 32 * b + j;
    }
  }
}

}  // namespace kernels_quant_test
}  // namespace fuselm::kernels
