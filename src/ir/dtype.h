#pragma once
// Element types named in the IR ("f32", "bf16", "i64", ...), shared by the IR and the runtime.
#include <cstdint>
#include <string_view>

namespace fuselm::ir {

enum class DType : uint8_t { f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean, c64 };

/// Parses an IR dtype name; throws std::runtime_error naming the unknown string.
DType parse_dtype(std::string_view name);
std::string_view dtype_name(DType d);
/// Bytes per element.
int64_t dtype_size(DType d);
bool is_floating(DType d);

}  // namespace fuselm::ir
