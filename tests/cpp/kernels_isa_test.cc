// ISA detection, names and forcing.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/tuning.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_isa_test {

TEST(KernelsIsa, NamesRoundTrip) {
  for (Isa isa : kAllIsas) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_FALSE(parse_isa("sse4"));
  EXPECT_FALSE(parse_isa(""));
}

TEST(KernelsIsa, DetectionIsConsistent) {
  EXPECT_TRUE(cpu_supports(Isa::generic));
  const Isa best = detect_cpu_isa();
  EXPECT_TRUE(cpu_supports(best));
  for (size_t i = 1; i < kIsaCount; ++i)  // nested levels: a level implies the ones below it
    if (cpu_supports(kAllIsas[i])) EXPECT_TRUE(cpu_supports(kAllIsas[i - 1])) << isa_name(kAllIsas[i]);
  for (Isa isa : kAllIsas)
    if (static_cast<int>(isa) > static_cast<int>(best)) EXPECT_FALSE(cpu_supports(isa));
}

// A level is supported exactly when the CPU has each feature of its target (the one CPUID read).
TEST(KernelsIsa, LevelsAreTheirFeatures) {
  for (Isa isa : kAllIsas) {
    bool all = true;
    std::string_view t = isa_target(isa);
    while (!t.empty()) {
      const size_t comma = t.find(',');
      EXPECT_TRUE(isa_has(isa, t.substr(0, comma)));
      all = all && cpu_has(t.substr(0, comma));
      t = comma == std::string_view::npos ? std::string_view{} : t.substr(comma + 1);
    }
    EXPECT_EQ(cpu_supports(isa), all) << isa_name(isa);
  }
  EXPECT_FALSE(isa_has(Isa::generic, "avx2"));
  EXPECT_TRUE(isa_has(Isa::amx, "amx-int8"));
  EXPECT_FALSE(isa_has(Isa::avx512, "avx512vnni"));
  EXPECT_THROW(cpu_has("sse9"), std::invalid_argument);
  EXPECT_FALSE(cpu_vendor().empty());
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
    // The variable forces every family, the quantized path included (the level's VNNI/AMX-INT8).
    EXPECT_EXIT(std::exit(cpu_isa() == isa && std::string(quant_kernel_path()) == testing::quant_path_of(isa) ? 0 : 1),
                ::testing::ExitedWithCode(0), "")
        << isa_name(isa);
  }
  setenv("FUSELM_CPU_ISA", "sse9", 1);
  std::string names;
  for (Isa isa : kAllIsas) names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
  EXPECT_EXIT(exit_3_if_invalid([] { cpu_isa(); }), ::testing::ExitedWithCode(3),
              "FUSELM_CPU_ISA='sse9': expected one of " + names);
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

// FUSELM_CPU_TUNING's settings: a table's name, single fields over it or over the detected table,
// and every malformed item named in the error.
TEST(KernelsTuning, ParsesSettingsOverATable) {
  const CpuTuning amd = tuning_for(CpuVendor::amd);
  CpuTuning t = parse_tuning("amd,gemv_streams=2,gemv_prefetch=0", CpuVendor::intel);
  EXPECT_EQ(t.vendor, CpuVendor::amd);
  EXPECT_EQ(t.gemv_streams, 2);
  EXPECT_EQ(t.gemv_prefetch, 0);
  EXPECT_EQ(t.gemv_memory_order, amd.gemv_memory_order);
  EXPECT_EQ(t.packed_decode_prefetch, amd.packed_decode_prefetch);
  t = parse_tuning("gemv_memory_order=1,packed_decode_prefetch=512", CpuVendor::intel);
  EXPECT_EQ(t.vendor, CpuVendor::intel);
  EXPECT_TRUE(t.gemv_memory_order);
  EXPECT_EQ(t.packed_decode_prefetch, 512);
  EXPECT_EQ(t.gemv_streams, tuning_for(CpuVendor::intel).gemv_streams);
  EXPECT_EQ(parse_tuning("intel", CpuVendor::amd).gemv_streams, tuning_for(CpuVendor::intel).gemv_streams);
  const auto message = [](const char* spec) {
    try {
      parse_tuning(spec, CpuVendor::amd);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("gemv_streams=3"), "FUSELM_CPU_TUNING='gemv_streams=3': gemv_streams must be 1, 2, 4 or 8");
  EXPECT_NE(message("amd,gemv_stream=2").find("unknown setting 'gemv_stream'"), std::string::npos) << message("amd,gemv_stream=2");
  EXPECT_NE(message("amd,gemv_prefetch=-1").find("'gemv_prefetch=-1' needs a whole number"), std::string::npos) << message("amd,gemv_prefetch=-1");
  EXPECT_NE(message("amd,gemv_prefetch=1k").find("'gemv_prefetch=1k' needs a whole number"), std::string::npos) << message("amd,gemv_prefetch=1k");
  EXPECT_NE(message("gemv_streams=2,amd").find("expected intel or amd"), std::string::npos) << message("gemv_streams=2,amd");
  EXPECT_NE(message("amd,,gemv_streams=2").find("expected intel or amd"), std::string::npos) << message("amd,,gemv_streams=2");
  EXPECT_NE(message("").find("expected intel or amd"), std::string::npos) << message("");
}

}  // namespace kernels_isa_test
}  // namespace fuselm::kernels
