// Machine probes: the read loop sums correctly on every ISA path; the probes return sane values.
#include <numeric>

#include "kernels/cpu/probe.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace {

class KernelsProbe : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsProbe, StreamSumAddsEveryElement) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (size_t n : {0, 1, 15, 64, 255, 256, 1000, 4096 + 77}) {
    std::vector<float> x(n);
    std::iota(x.begin(), x.end(), 1.f);  // small integers: the sum is exact in fp32
    EXPECT_EQ(stream_sum_f32(x.data(), n), static_cast<float>(n * (n + 1) / 2)) << n;
  }
}

TEST_P(KernelsProbe, ProbesReturnPositiveRates) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  EXPECT_GT(measure_memory_bandwidth_gbs(size_t{8} << 20, 1), 0.0);
  EXPECT_GT(measure_fma_peak_gflops(0.01), 0.0);
}

INSTANTIATE_TEST_SUITE_P(, KernelsProbe, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace
}  // namespace fuselm::kernels
