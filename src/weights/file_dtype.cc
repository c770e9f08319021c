#include "weights/file_dtype.h"

#include <array>

namespace fuselm::weights {

namespace {

struct Entry {
  FileDType dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<Entry, 15> kEntries{{
    {FileDType::F64, "F64", 8},     {FileDType::F32, "F32", 4},         {FileDType::F16, "F16", 2},
    {FileDType::BF16, "BF16", 2},   {FileDType::F8_E4M3, "F8_E4M3", 1}, {FileDType::F8_E5M2, "F8_E5M2", 1},
    {FileDType::I64, "I64", 8},     {FileDType::I32, "I32", 4},         {FileDType::I16, "I16", 2},
    {FileDType::I8, "I8", 1},       {FileDType::U64, "U64", 8},         {FileDType::U32, "U32", 4},
    {FileDType::U16, "U16", 2},     {FileDType::U8, "U8", 1},           {FileDType::BOOL, "BOOL", 1},
}};

constexpr bool entries_in_enum_order() {
  for (size_t i = 0; i < kEntries.size(); ++i)
    if (static_cast<size_t>(kEntries[i].dtype) != i) return false;
  return true;
}
static_assert(entries_in_enum_order(), "kEntries must follow the order of FileDType");

const Entry& entry(FileDType d) { return kEntries[static_cast<size_t>(d)]; }

}  // namespace

std::string_view file_dtype_name(FileDType d) { return entry(d).name; }

int64_t file_dtype_size(FileDType d) { return entry(d).size; }

std::optional<FileDType> parse_file_dtype(std::string_view name) {
  for (const Entry& e : kEntries)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

}  // namespace fuselm::weights
