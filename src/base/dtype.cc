#include "base/dtype.h"

#include <array>
#include <stdexcept>
#include <string>

namespace fuselm {
namespace {

constexpr std::array<std::string_view, 16> kNames{
    "f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool", "c64",
    "f8_e4m3", "f8_e5m2", "u64", "u32", "u16"};
static_assert(kNames.size() == static_cast<size_t>(DType::u16) + 1, "one name per DType, in order");

}  // namespace

std::string_view dtype_name(DType d) { return kNames[static_cast<size_t>(d)]; }

std::optional<DType> find_dtype(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name && !is_raw(static_cast<DType>(i))) return static_cast<DType>(i);
  return std::nullopt;
}

DType parse_dtype(std::string_view name) {
  if (auto d = find_dtype(name)) return *d;
  throw std::runtime_error("unknown dtype '" + std::string(name) + "'");
}

}  // namespace fuselm
