#include "weights/file_dtype.h"

#include <array>

namespace fuselm::weights {

namespace {

struct Entry {
  DType dtype;
  std::string_view name;
};

/// Every dtype of the safetensors format.
constexpr std::array<Entry, 15> kEntries{{
    {DType::f64, "F64"},         {DType::f32, "F32"},         {DType::f16, "F16"},
    {DType::bf16, "BF16"},       {DType::f8_e4m3, "F8_E4M3"}, {DType::f8_e5m2, "F8_E5M2"},
    {DType::i64, "I64"},         {DType::i32, "I32"},         {DType::i16, "I16"},
    {DType::i8, "I8"},           {DType::u64, "U64"},         {DType::u32, "U32"},
    {DType::u16, "U16"},         {DType::u8, "U8"},           {DType::boolean, "BOOL"},
}};

}  // namespace

std::string_view file_dtype_name(DType d) {
  for (const Entry& e : kEntries)
    if (e.dtype == d) return e.name;
  return "?";
}

std::optional<DType> parse_file_dtype(std::string_view name) {
  for (const Entry& e : kEntries)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

}  // namespace fuselm::weights
