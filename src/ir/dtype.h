#pragma once
// The IR's element types are the engine's one DType (base/dtype.h); ir:: spells the same names.
#include "base/dtype.h"

namespace fuselm::ir {

using fuselm::DType;
using fuselm::dtype_name;
using fuselm::dtype_size;
using fuselm::is_floating;
using fuselm::parse_dtype;

}  // namespace fuselm::ir
