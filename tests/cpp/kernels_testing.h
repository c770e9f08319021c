#pragma once
// Shared helpers of the kernel tests: ISA parameters, random data, scoped thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"

namespace fuselm::kernels::testing {

/// Every path, supported or not (tests skip the unsupported ones, so the skip shows in the log).
inline std::vector<Isa> all_isas() { return {std::begin(kAllIsas), std::end(kAllIsas)}; }

/// The quant_linear path (quant_kernel_path()) that level `isa` runs: its features alone decide it.
inline const char* quant_path_of(Isa isa) {
  return isa_has(isa, "amx-int8")     ? "amx"
         : isa_has(isa, "avx512vnni") ? "vnni"
         : isa_has(isa, "avx2")       ? "avx2"
                                      : "generic";
}

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

#define FUSELM_REQUIRE_ISA(isa)                                              \
  do {                                                                       \
    if (!::fuselm::kernels::cpu_supports(isa))                               \
      GTEST_SKIP() << "CPU lacks the " << ::fuselm::kernels::isa_name(isa) << " path"; \
  } while (0)

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Random weights stored as `d` (raw bytes), plus their exact fp32 values.
struct Weights {
  std::vector<unsigned char> bytes;
  std::vector<float> values;
  const void* data() const { return bytes.data(); }
};

inline Weights random_weights(size_t n, DType d, uint32_t seed, float scale = 1.f) {
  Weights w;
  w.values = random_floats(n, seed, scale);
  w.bytes.resize(n * dtype_size(d));
  for (size_t i = 0; i < n; ++i) {
    if (d == DType::f32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
    } else {
      const uint16_t h = d == DType::bf16 ? f32_to_bf16(w.values[i]) : f32_to_f16(w.values[i]);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.values[i] = d == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return w;
}

/// ggml's block_q8_0: 32 values, fp16 scale d then 32 int8 q, x = d·q (34 bytes).
inline constexpr int64_t kQ8Block = 32, kQ8BlockBytes = 34;
inline int64_t q8_0_blocks(int64_t n) { return (n + kQ8Block - 1) / kQ8Block; }

/// ggml's quantize_row_q8_0_ref, transcribed, for n values (zero-padded to whole blocks) into dst
/// (q8_0_blocks(n) blocks): the oracle of the q8_0 KV caches.
inline void quantize_q8_0_padded(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < q8_0_blocks(n); ++b) {
    float v[kQ8Block] = {};
    for (int64_t e = 0; e < kQ8Block && b * kQ8Block + e < n; ++e) v[e] = x[b * kQ8Block + e];
    float amax = 0.f;
    for (float f : v) amax = std::max(amax, std::fabs(f));
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    uint8_t* blk = dst + b * kQ8BlockBytes;
    const uint16_t h = f32_to_f16(d);
    std::memcpy(blk, &h, 2);
    for (int e = 0; e < kQ8Block; ++e) blk[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[e] * id)));
  }
}

/// The first n values that q8_0 blocks at src hold (fp16 scale × int8), in double.
inline std::vector<double> dequantize_q8_0(const uint8_t* src, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const uint8_t* blk = src + e / kQ8Block * kQ8BlockBytes;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    out[e] = static_cast<double>(f16_to_f32(h)) * static_cast<int8_t>(blk[2 + e % kQ8Block]);
  }
  return out;
}

/// Sets omp_set_num_threads while alive.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : previous_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(previous_); }

 private:
  int previous_;
};

}  // namespace fuselm::kernels::testing
