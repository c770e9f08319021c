#include "kernels/cpu/tuning.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/isa.h"

namespace fuselm::kernels {
namespace {

// The vendor from isa.cc's one CPUID read.
CpuVendor detect_vendor() { return cpu_vendor() == "AuthenticAMD" ? CpuVendor::amd : CpuVendor::intel; }

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
  t.packed_decode_prefetch = vendor == CpuVendor::amd ? 1024 : 0;
  t.gemv_prefetch = vendor == CpuVendor::amd ? 1024 : 0;
  t.gemv_streams = vendor == CpuVendor::amd ? 4 : 1;
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
