#pragma once
// The one place where dtypes meet: the IR's (and runtime tensors') ir::DType, the kernels'
// storage dtypes kernels::DType (the weights a kernel reads as raw bits: f32, bf16, f16) and the
// safetensors header's FileDType. Every mapping between them is here.
#include <optional>

#include "ir/dtype.h"
#include "kernels/cpu/dtype.h"
#include "weights/file_dtype.h"

namespace fuselm::weights {

/// The kernels' storage dtype of an IR dtype; nullopt for those no kernel reads as weights.
std::optional<kernels::DType> storage_dtype(ir::DType d);
/// The storage dtype of a checkpoint dtype; nullopt for the non-float ones.
std::optional<kernels::DType> storage_dtype(FileDType d);
ir::DType ir_dtype(kernels::DType d);
/// The IR dtype of a checkpoint dtype; nullopt for those the engine has no tensors of (F8, U16, ...).
std::optional<ir::DType> ir_dtype(FileDType d);

}  // namespace fuselm::weights
