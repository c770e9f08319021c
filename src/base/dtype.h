#pragma once
// The engine's one element-type enum. The IR names its tensors' dtypes with it ("f32", "bf16",
// "i64", ...), runtime tensors carry it, kernels take it for the storage dtype of the weights they
// read (f32, bf16, f16) and the weight files' own type codes (safetensors' "BF16", GGUF's type
// numbers) are parsed into it in weights/. This folder depends on nothing, so every folder may
// include it.
#include <cstdint>
#include <optional>
#include <string_view>

namespace fuselm {

/// The first eleven are the IR's dtypes; the last five exist only in weight files (the engine holds
/// their bytes, never computes with them: see is_raw). Values are stable: the executor passes a
/// dtype to ops as its integer value.
enum class DType : uint8_t {
  f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean, c64,  // the IR's
  f8_e4m3, f8_e5m2, u64, u32, u16                            // weight files' only
};

/// Bytes per element.
constexpr int64_t dtype_size(DType d) {
  switch (d) {
    case DType::f64: case DType::i64: case DType::c64: case DType::u64: return 8;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f16: case DType::bf16: case DType::i16: case DType::u16: return 2;
    default: return 1;
  }
}

constexpr bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::f64;
}

/// True for the dtypes no engine tensor has (fp8, unsigned wider than a byte): a weight file may
/// hold them, the IR may not name them.
constexpr bool is_raw(DType d) { return d >= DType::f8_e4m3; }

/// The lower-case name: "f32", "bf16", "bool", "f8_e4m3", ...
std::string_view dtype_name(DType d);
/// Parses an IR dtype name (any but the raw ones); throws std::runtime_error naming the unknown
/// string.
DType parse_dtype(std::string_view name);
/// Like parse_dtype, nullopt instead of the error (raw names are not found either).
std::optional<DType> find_dtype(std::string_view name);

}  // namespace fuselm
