#pragma once
// Element types as a safetensors header names them ("F32", "BF16", "I64", ...).
#include <cstdint>
#include <optional>
#include <string_view>

namespace fuselm::weights {

/// Every dtype of the safetensors format. The engine computes with F32, BF16 and F16; the others
/// are exposed as raw bytes.
enum class FileDType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL
};

/// The header spelling: "F32", "BF16", ...
std::string_view file_dtype_name(FileDType d);
/// Parses a header spelling; nullopt for anything else (the caller names the tensor in its error).
std::optional<FileDType> parse_file_dtype(std::string_view name);
/// Bytes per element.
int64_t file_dtype_size(FileDType d);

}  // namespace fuselm::weights
