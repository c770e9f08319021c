// Machine probes: the read loop sums correctly on every ISA path; the probes return sane values.
#include <numeric>

#include "bench/probe.h"
#include "kernels_testing.h"

namespace fuselm::bench {
namespace bench_probe_test {

using kernels::Isa;
using kernels::ScopedCpuIsa;
namespace testing = kernels::testing;

class BenchProbe : public ::testing::TestWithParam<Isa> {};

TEST_P(BenchProbe, StreamSumAddsEveryElement) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (size_t n : {0, 1, 15, 64, 255, 256, 1000, 4096 + 77}) {
    std::vector<float> x(n);
    std::iota(x.begin(), x.end(), 1.f);  // small integers: the sum is exact in fp32
    for (int streams : {1, 4})
      EXPECT_EQ(stream_sum_f32(x.data(), n, streams), static_cast<float>(n * (n + 1) / 2)) << n << " " << streams;
  }
}

TEST_P(BenchProbe, ProbesReturnPositiveRates) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  EXPECT_GT(measure_memory_bandwidth_gbs(size_t{8} << 20, 1), 0.0);
  EXPECT_GT(measure_fma_peak_gflops(0.01), 0.0);
}

INSTANTIATE_TEST_SUITE_P(, BenchProbe, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace bench_probe_test
}  // namespace fuselm::bench
