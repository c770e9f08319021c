#include "weights/dtypes.h"

namespace fuselm::weights {

std::optional<kernels::DType> storage_dtype(ir::DType d) {
  switch (d) {
    case ir::DType::f32: return kernels::DType::f32;
    case ir::DType::bf16: return kernels::DType::bf16;
    case ir::DType::f16: return kernels::DType::f16;
    default: return std::nullopt;
  }
}

std::optional<kernels::DType> storage_dtype(FileDType d) {
  const auto ir = ir_dtype(d);
  return ir ? storage_dtype(*ir) : std::nullopt;
}

ir::DType ir_dtype(kernels::DType d) {
  switch (d) {
    case kernels::DType::f32: return ir::DType::f32;
    case kernels::DType::bf16: return ir::DType::bf16;
    case kernels::DType::f16: return ir::DType::f16;
  }
  return ir::DType::f32;
}

std::optional<ir::DType> ir_dtype(FileDType d) {
  switch (d) {
    case FileDType::F32: return ir::DType::f32;
    case FileDType::F64: return ir::DType::f64;
    case FileDType::BF16: return ir::DType::bf16;
    case FileDType::F16: return ir::DType::f16;
    case FileDType::I64: return ir::DType::i64;
    case FileDType::I32: return ir::DType::i32;
    case FileDType::BOOL: return ir::DType::boolean;
    case FileDType::U8: return ir::DType::u8;
    default: return std::nullopt;
  }
}

}  // namespace fuselm::weights
