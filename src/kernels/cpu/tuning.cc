#include "kernels/cpu/tuning.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace fuselm::kernels {
namespace {

CpuVendor detect_vendor() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char id[13];
    std::memcpy(id, &b, 4);
    std::memcpy(id + 4, &d, 4);
    std::memcpy(id + 8, &c, 4);
    id[12] = '\0';
    if (std::strcmp(id, "AuthenticAMD") == 0) return CpuVendor::amd;
  }
#endif
  return CpuVendor::intel;
}

CpuTuning decide() {
  const char* env = std::getenv("FUSELM_CPU_TUNING");
  if (!env || !*env) return tuning_for(detect_vendor());
  const std::optional<CpuVendor> asked = parse_vendor(env);
  if (!asked) throw std::invalid_argument(fmt::format("FUSELM_CPU_TUNING='{}': expected intel or amd", env));
  return tuning_for(*asked);
}

CpuTuning& current() {
  static CpuTuning t = decide();  // thread-safe, once
  return t;
}

}  // namespace

CpuTuning tuning_for(CpuVendor vendor) {
  CpuTuning t;
  t.vendor = vendor;
  t.gemv_memory_order = vendor == CpuVendor::amd;
  return t;
}

const char* vendor_name(CpuVendor vendor) { return vendor == CpuVendor::amd ? "amd" : "intel"; }

std::optional<CpuVendor> parse_vendor(std::string_view name) {
  if (name == "intel") return CpuVendor::intel;
  if (name == "amd") return CpuVendor::amd;
  return std::nullopt;
}

const CpuTuning& cpu_tuning() { return current(); }

ScopedCpuTuning::ScopedCpuTuning(const CpuTuning& tuning) : previous_(current()) { current() = tuning; }

ScopedCpuTuning::~ScopedCpuTuning() { current() = previous_; }

}  // namespace fuselm::kernels
