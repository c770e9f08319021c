#include "ir/dtype.h"

#include <stdexcept>
#include <string>

namespace fuselm::ir {
namespace {
struct Entry {
  DType dtype;
  std::string_view name;
  int64_t size;
};
constexpr Entry kTable[] = {
    {DType::f32, "f32", 4}, {DType::f16, "f16", 2},  {DType::bf16, "bf16", 2},
    {DType::f64, "f64", 8}, {DType::i64, "i64", 8},  {DType::i32, "i32", 4},
    {DType::i16, "i16", 2}, {DType::i8, "i8", 1},    {DType::u8, "u8", 1},
    {DType::boolean, "bool", 1}, {DType::c64, "c64", 8},
};
}  // namespace

DType parse_dtype(std::string_view name) {
  for (const auto& e : kTable)
    if (e.name == name) return e.dtype;
  throw std::runtime_error("unknown dtype '" + std::string(name) + "'");
}

std::string_view dtype_name(DType d) { return kTable[static_cast<int>(d)].name; }
int64_t dtype_size(DType d) { return kTable[static_cast<int>(d)].size; }
bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::f64;
}

}  // namespace fuselm::ir
