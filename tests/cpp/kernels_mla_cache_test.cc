// mla_attention over a latent cache stored f32, bf16 or q8_0, on every ISA path: the rows
// mla_write_latent writes are, byte for byte, the latent and the rope key each rounded to bf16, or
// each quantized as kernels_testing.h's transcription of ggml's quantize_row_q8_0_ref (zero-padded
// to whole 32-blocks apart: ceil(R/32) + ceil(Dr/32) blocks); the output equals a double-precision
// expanded attention (per head k_j = [W_k·c_j | rope_j], v_j = W_v·c_j, causal softmax) over the
// values the cache holds. Cases: DeepSeek's 512 + 64 row (decode, heads wider than 256), a rope
// key and a latent that are not whole blocks, the absorbed and the expanded forms, two threads.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/mla.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_mla_cache_test {

using testing::dequantize_q8_0;
using testing::kQ8BlockBytes;
using testing::q8_0_blocks;
using testing::quantize_q8_0_padded;
using testing::random_floats;

struct MlaCase {
  int64_t H, R, Dr, Dn, Dv, ctx, t;
  int threads = 1;
  std::string name() const {
    return fmt::format("H{}_R{}_Dr{}_Dn{}_Dv{}_ctx{}_t{}_threads{}", H, R, Dr, Dn, Dv, ctx, t, threads);
  }
};

const char* type_name(MlaCacheType t) {
  return t == MlaCacheType::q8_0 ? "q8_0" : t == MlaCacheType::bf16 ? "bf16" : "f32";
}

// One sequence over a latent cache of `type`: its slots (scattered, unused slots garbage), the
// context's latent/rope values, q and the up-projection.
struct MlaSequence {
  MlaCase c;
  MlaCacheType type;
  int64_t num_slots = 0, row_bytes = 0;
  std::vector<int32_t> slots;
  std::vector<uint8_t> cache;
  std::vector<float> lat, rot, q, w;  // [ctx, R], [ctx, Dr], [H, t, Dn+Dr], [H·(Dn+Dv), R]

  MlaSequence(const MlaCase& cs, MlaCacheType ty, uint32_t seed) : c(cs), type(ty) {
    num_slots = c.ctx + 7;
    const int64_t Dl = c.R + c.Dr;
    row_bytes = type == MlaCacheType::q8_0 ? mla_q8_row_blocks(c.R, c.Dr) * kQ8BlockBytes
                                           : Dl * (type == MlaCacheType::bf16 ? 2 : 4);
    std::vector<int32_t> perm(static_cast<size_t>(num_slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    slots.assign(perm.begin(), perm.begin() + c.ctx);
    cache.assign(static_cast<size_t>(num_slots * row_bytes), 0xff);  // NaN in every dtype
    lat = random_floats(static_cast<size_t>(c.ctx * c.R), seed + 1);
    rot = random_floats(static_cast<size_t>(c.ctx * c.Dr), seed + 2);
    q = random_floats(static_cast<size_t>(c.H * c.t * (c.Dn + c.Dr)), seed + 3);
    w = random_floats(static_cast<size_t>(c.H * (c.Dn + c.Dv) * c.R), seed + 4, 1.f / std::sqrt(float(c.R)));
    for (int64_t j = 0; j < c.ctx - c.t; ++j) write_expected(j, cache.data());
  }

  // Context position j's row as the kernel must write it, into `dst` (a cache like `cache`).
  void write_expected(int64_t j, uint8_t* dst) const {
    uint8_t* row = dst + slots[j] * row_bytes;
    const float* l = &lat[j * c.R];
    const float* r = &rot[j * c.Dr];
    if (type == MlaCacheType::q8_0) {
      quantize_q8_0_padded(l, c.R, row);
      quantize_q8_0_padded(r, c.Dr, row + q8_0_blocks(c.R) * kQ8BlockBytes);
      return;
    }
    for (int64_t e = 0; e < c.R + c.Dr; ++e) {
      const float x = e < c.R ? l[e] : r[e - c.R];
      if (type == MlaCacheType::bf16) {
        const uint16_t h = f32_to_bf16(x);
        std::memcpy(row + 2 * e, &h, 2);
      } else {
        std::memcpy(row + 4 * e, &x, 4);
      }
    }
  }

  // The R + Dr values the expected row of position j holds.
  std::vector<double> held(int64_t j) const {
    std::vector<uint8_t> buf(static_cast<size_t>(num_slots * row_bytes));
    write_expected(j, buf.data());
    const uint8_t* row = buf.data() + slots[j] * row_bytes;
    if (type == MlaCacheType::q8_0) {
      std::vector<double> v = dequantize_q8_0(row, c.R);
      const auto r = dequantize_q8_0(row + q8_0_blocks(c.R) * kQ8BlockBytes, c.Dr);
      v.insert(v.end(), r.begin(), r.end());
      return v;
    }
    std::vector<double> v(static_cast<size_t>(c.R + c.Dr));
    for (int64_t e = 0; e < c.R + c.Dr; ++e) {
      if (type == MlaCacheType::bf16) {
        uint16_t h;
        std::memcpy(&h, row + 2 * e, 2);
        v[e] = bf16_to_f32(h);
      } else {
        float f;
        std::memcpy(&f, row + 4 * e, 4);
        v[e] = f;
      }
    }
    return v;
  }

  // Writes the new tokens' rows (mla_write_latent), then runs mla_attention into out.
  void run(std::vector<float>& out) {
    const int64_t first = c.ctx - c.t;
    mla_write_latent(&lat[first * c.R], &rot[first * c.Dr], c.t, c.R, c.Dr, &slots[first], cache.data(), type);
    MlaArgs a;
    a.q = q.data(), a.q_head_stride = c.t * (c.Dn + c.Dr);
    a.cache = cache.data(), a.cache_type = type, a.num_slots = num_slots, a.slots = slots.data();
    a.ctx = c.ctx, a.t = c.t;
    a.w_up = w.data(), a.w_dtype = DType::f32;
    a.H = c.H, a.R = c.R, a.Dr = c.Dr, a.Dn = c.Dn, a.Dv = c.Dv;
    a.scale = 1.f / std::sqrt(static_cast<float>(c.Dn + c.Dr));
    a.out = out.data();
    std::vector<float> scratch(static_cast<size_t>(mla_scratch_floats(a)), std::numeric_limits<float>::quiet_NaN());
    a.scratch = scratch.data();
    mla_attention(a);
  }

  // Double-precision expanded attention over the values the cache holds: [t, H, Dv].
  std::vector<double> reference() const {
    const int64_t Dkv = c.Dn + c.Dv;
    std::vector<std::vector<double>> rows;
    for (int64_t j = 0; j < c.ctx; ++j) rows.push_back(held(j));
    const double scale = 1.f / std::sqrt(static_cast<float>(c.Dn + c.Dr));
    std::vector<double> out(static_cast<size_t>(c.t * c.H * c.Dv), 0.0);
    for (int64_t h = 0; h < c.H; ++h) {
      // K_nope and V of head h for every context row.
      std::vector<double> kn(static_cast<size_t>(c.ctx * c.Dn)), vv(static_cast<size_t>(c.ctx * c.Dv));
      for (int64_t j = 0; j < c.ctx; ++j)
        for (int64_t o = 0; o < Dkv; ++o) {
          double acc = 0;
          for (int64_t r = 0; r < c.R; ++r) acc += static_cast<double>(w[(h * Dkv + o) * c.R + r]) * rows[j][r];
          (o < c.Dn ? kn[j * c.Dn + o] : vv[j * c.Dv + o - c.Dn]) = acc;
        }
      for (int64_t i = 0; i < c.t; ++i) {
        const float* qi = &q[(h * c.t + i) * (c.Dn + c.Dr)];
        const int64_t pos = c.ctx - c.t + i;
        std::vector<double> s(static_cast<size_t>(pos + 1));
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.Dn; ++d) dot += qi[d] * kn[j * c.Dn + d];
          for (int64_t d = 0; d < c.Dr; ++d) dot += qi[c.Dn + d] * rows[j][c.R + d];
          mx = std::max(mx, s[j] = dot * scale);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        double* o = &out[(i * c.H + h) * c.Dv];
        for (int64_t j = 0; j <= pos; ++j)
          for (int64_t e = 0; e < c.Dv; ++e) o[e] += s[j] / sum * vv[j * c.Dv + e];
      }
    }
    return out;
  }

  // The new tokens' rows equal the expected ones, byte for byte.
  void expect_new_rows_written() const {
    std::vector<uint8_t> want(cache.size());
    for (int64_t j = c.ctx - c.t; j < c.ctx; ++j) {
      write_expected(j, want.data());
      ASSERT_EQ(0, std::memcmp(&want[slots[j] * row_bytes], &cache[slots[j] * row_bytes], row_bytes))
          << "row of position " << j;
    }
  }
};

class KernelsMlaCache : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsMlaCache, EqualsDoubleExpandedAttentionOverTheRowsItWrites) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const MlaCase cases[] = {
      {4, 512, 64, 32, 32, 70, 1},       // DeepSeek's row, decode: q' of 576 values (plain dot products)
      {3, 40, 24, 8, 8, 45, 3},          // latent of 1.25 blocks, rope key of 0.75: absorbed
      {4, 64, 8, 16, 12, 130, 2, 2},     // a rope key of a quarter block, two threads
      {4, 64, 40, 16, 12, 50, 40, 2},    // expanded (40 · 100 > 28 · 64), rope key of 1.25 blocks
      {2, 32, 8, 16, 16, 1, 1},          // the first token
  };
  uint32_t seed = 31;
  for (const auto& c : cases)
    for (MlaCacheType type : {MlaCacheType::f32, MlaCacheType::bf16, MlaCacheType::q8_0}) {
      SCOPED_TRACE(fmt::format("{} cache {}", c.name(), type_name(type)));
      testing::ScopedThreads threads(c.threads);
      MlaSequence s(c, type, seed += 10);
      std::vector<float> out(static_cast<size_t>(c.t * c.H * c.Dv), std::numeric_limits<float>::quiet_NaN());
      s.run(out);
      s.expect_new_rows_written();
      const auto want = s.reference();
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
    }
}

// The cache dtype matters: a q8_0 cache's result differs from the f32 one (a test of the reference
// that cannot tell them apart could not fail), by about the quantization's error.
TEST_P(KernelsMlaCache, Q8CacheDiffersFromF32ByItsRounding) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const MlaCase c{4, 64, 8, 16, 12, 40, 1};
  std::vector<float> f(static_cast<size_t>(c.H * c.Dv)), q8(f.size());
  MlaSequence sf(c, MlaCacheType::f32, 5), sq(c, MlaCacheType::q8_0, 5);
  sf.run(f);
  sq.run(q8);
  double max_diff = 0;
  for (size_t i = 0; i < f.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(f[i]) - q8[i]));
  EXPECT_GT(max_diff, 1e-5);
  EXPECT_LT(max_diff, 0.05);
}

TEST(KernelsMlaCacheLayout, Q8RowBlocksPadEachPart) {
  EXPECT_EQ(mla_q8_row_blocks(512, 64), 16 + 2);  // 612 bytes where bf16 takes 1152
  EXPECT_EQ(mla_q8_row_blocks(40, 24), 2 + 1);
  EXPECT_EQ(mla_q8_row_blocks(32, 8), 1 + 1);
}

INSTANTIATE_TEST_SUITE_P(, KernelsMlaCache, ::testing::ValuesIn(testing::all_isas()), testing::isa_param_name);

}  // namespace kernels_mla_cache_test
}  // namespace fuselm::kernels
