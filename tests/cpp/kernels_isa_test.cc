// ISA detection, names and forcing.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/tuning.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace {

TEST(KernelsIsa, NamesRoundTrip) {
  for (Isa isa : kAllIsas) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_FALSE(parse_isa("sse4"));
  EXPECT_FALSE(parse_isa(""));
}

TEST(KernelsIsa, DetectionIsConsistent) {
  EXPECT_TRUE(cpu_supports(Isa::generic));
  const Isa best = detect_cpu_isa();
  EXPECT_TRUE(cpu_supports(best));
  if (cpu_supports(Isa::avx512)) EXPECT_TRUE(cpu_supports(Isa::avx2));
  if (cpu_supports(Isa::avx512bf16)) EXPECT_TRUE(cpu_supports(Isa::avx512));
  if (cpu_supports(Isa::amx)) EXPECT_TRUE(cpu_supports(Isa::avx512bf16));
  for (Isa isa : kAllIsas)
    if (static_cast<int>(isa) > static_cast<int>(best)) EXPECT_FALSE(cpu_supports(isa));
}

TEST(KernelsIsa, ScopedOverrideForcesAndRestores) {
  const Isa before = cpu_isa();
  for (Isa isa : kAllIsas) {
    if (!cpu_supports(isa)) {
      EXPECT_THROW(ScopedCpuIsa{isa}, std::invalid_argument);
      continue;
    }
    {
      ScopedCpuIsa forced(isa);
      EXPECT_EQ(cpu_isa(), isa);
    }
    EXPECT_EQ(cpu_isa(), before);
  }
}

// In a death-test child: runs fn, exits 3 printing the message if it threw std::invalid_argument, else 0.
template <class F>
[[noreturn]] void exit_3_if_invalid(F fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
  std::exit(0);
}

// FUSELM_CPU_ISA is read once per process, so these run in a fresh child process.
TEST(KernelsIsaDeathTest, EnvironmentForcesThePath) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (Isa isa : kAllIsas) {
    if (!cpu_supports(isa)) continue;
    setenv("FUSELM_CPU_ISA", isa_name(isa), 1);
    EXPECT_EXIT(std::exit(cpu_isa() == isa ? 0 : 1), ::testing::ExitedWithCode(0), "")
        << isa_name(isa);
  }
  setenv("FUSELM_CPU_ISA", "sse9", 1);
  EXPECT_EXIT(exit_3_if_invalid([] { cpu_isa(); }), ::testing::ExitedWithCode(3),
              "FUSELM_CPU_ISA='sse9': expected generic, avx2, avx512, avx512bf16 or amx");
  unsetenv("FUSELM_CPU_ISA");
}

// The tuning table: named by FUSELM_CPU_TUNING (decided once per process, so each case runs in a
// child), an unknown name is an error naming the variable, and ScopedCpuTuning restores.
TEST(KernelsTuningDeathTest, EnvironmentPicksTheTableAndScopesRestore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a re-executed child decides afresh
  EXPECT_TRUE(tuning_for(CpuVendor::amd).gemv_memory_order);
  EXPECT_FALSE(tuning_for(CpuVendor::intel).gemv_memory_order);
  EXPECT_EQ(parse_vendor("amd"), CpuVendor::amd);
  EXPECT_FALSE(parse_vendor("arm").has_value());
  for (CpuVendor v : {CpuVendor::intel, CpuVendor::amd}) {
    setenv("FUSELM_CPU_TUNING", vendor_name(v), 1);
    EXPECT_EXIT(std::exit(cpu_tuning().vendor == v ? 0 : 1), ::testing::ExitedWithCode(0), "") << vendor_name(v);
  }
  setenv("FUSELM_CPU_TUNING", "arm", 1);
  EXPECT_EXIT(exit_3_if_invalid([] { cpu_tuning(); }), ::testing::ExitedWithCode(3),
              "FUSELM_CPU_TUNING='arm': expected intel or amd");
  unsetenv("FUSELM_CPU_TUNING");
  const CpuTuning before = cpu_tuning();
  {
    CpuTuning flipped = before;
    flipped.gemv_memory_order = !before.gemv_memory_order;
    ScopedCpuTuning scoped(flipped);
    EXPECT_EQ(cpu_tuning().gemv_memory_order, !before.gemv_memory_order);
  }
  EXPECT_EQ(cpu_tuning().gemv_memory_order, before.gemv_memory_order);
}

}  // namespace
}  // namespace fuselm::kernels
