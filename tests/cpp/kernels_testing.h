#pragma once
// Shared helpers of the kernel tests: ISA parameters, random data, scoped thread counts.
#include <gtest/gtest.h>
#include <omp.h>

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

/// Sets omp_set_num_threads while alive.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : previous_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(previous_); }

 private:
  int previous_;
};

}  // namespace fuselm::kernels::testing
