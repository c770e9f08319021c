#pragma once
// Element types as a safetensors header spells them ("F32", "BF16", "I64", ...): the parse table
// from the file format's own names to the engine's one DType (base/dtype.h).
#include <optional>
#include <string_view>

#include "base/dtype.h"

namespace fuselm::weights {

/// The header spelling of a dtype: "F32", "BF16", "BOOL", "F8_E4M3", ... (every DType but c64,
/// which safetensors has no name for: "?").
std::string_view file_dtype_name(DType d);
/// Parses a header spelling (every dtype of the safetensors format); nullopt for anything else (the
/// caller names the tensor in its error).
std::optional<DType> parse_file_dtype(std::string_view name);

}  // namespace fuselm::weights
