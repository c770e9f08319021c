#include "kernels/cpu/strided.h"

#include <stdexcept>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

double load_double(const void* data, DType dt, int64_t o) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(data)[o];
    case DType::f64: return static_cast<const double*>(data)[o];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[o]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[o]);
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data)[o]);
    case DType::i32: return static_cast<const int32_t*>(data)[o];
    case DType::i16: return static_cast<const int16_t*>(data)[o];
    case DType::i8: return static_cast<const int8_t*>(data)[o];
    case DType::u8: return static_cast<const uint8_t*>(data)[o];
    case DType::boolean: return static_cast<const uint8_t*>(data)[o] ? 1.0 : 0.0;
    default: throw std::runtime_error("dtype not supported in elementwise ops");
  }
}

void store_double(void* data, DType dt, int64_t o, double v) {
  switch (dt) {
    case DType::f32: static_cast<float*>(data)[o] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(data)[o] = v; break;
    case DType::bf16: static_cast<uint16_t*>(data)[o] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(data)[o] = f32_to_f16(static_cast<float>(v)); break;
    case DType::i64: static_cast<int64_t*>(data)[o] = static_cast<int64_t>(v); break;
    case DType::i32: static_cast<int32_t*>(data)[o] = static_cast<int32_t>(v); break;
    case DType::i16: static_cast<int16_t*>(data)[o] = static_cast<int16_t>(v); break;
    case DType::i8: static_cast<int8_t*>(data)[o] = static_cast<int8_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(data)[o] = static_cast<uint8_t>(v); break;
    case DType::boolean: static_cast<uint8_t*>(data)[o] = v != 0.0; break;
    default: throw std::runtime_error("dtype not supported in elementwise ops");
  }
}

std::array<int64_t, kMaxStridedDims> broadcast_strides(const Strided& t, const Strided& out) {
  std::array<int64_t, kMaxStridedDims> s{};
  for (int i = 0; i < out.ndim; ++i) {
    const int it = t.ndim - out.ndim + i;
    s[i] = (it < 0 || t.shape[it] == 1) ? 0 : t.strides[it];
  }
  return s;
}

}  // namespace fuselm::kernels
