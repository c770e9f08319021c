#pragma once
// Where a tensor's memory lives and an op runs. The CPU is the only device built; the enum is the
// seam a second backend fills in (its allocator, its kernels).
#include <cstdint>
#include <string_view>

namespace fuselm::runtime {

enum class Device : uint8_t { cpu };

inline std::string_view device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
  }
  return "?";
}

}  // namespace fuselm::runtime
