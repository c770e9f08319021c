// libFuzzer target: the FUSELM_CPU_TUNING spec (a table's name and/or single settings). parse_tuning
// either returns a tuning or throws std::invalid_argument naming the variable and the item;
// anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "kernels/cpu/tuning.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  for (const auto vendor : {fuselm::kernels::CpuVendor::intel, fuselm::kernels::CpuVendor::amd}) {
    try {
      fuselm::kernels::parse_tuning(spec, vendor);
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
