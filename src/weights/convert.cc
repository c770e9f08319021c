#include "weights/convert.h"

#include <cstring>

namespace fuselm::weights {

namespace {

using kernels::DType;

/// Element i of `src`, read byte-wise (mapped tensors may be misaligned).
template <DType S>
float load(const unsigned char* src, int64_t i) {
  if constexpr (S == DType::f32) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return S == DType::bf16 ? kernels::bf16_to_f32(h) : kernels::f16_to_f32(h);
  }
}

template <DType S, DType D>
void convert(const unsigned char* src, void* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
  for (int64_t i = 0; i < n; ++i) {
    const float v = load<S>(src, i);
    if constexpr (D == DType::f32) static_cast<float*>(dst)[i] = v;
    if constexpr (D == DType::bf16) static_cast<uint16_t*>(dst)[i] = kernels::f32_to_bf16(v);
    if constexpr (D == DType::f16) static_cast<uint16_t*>(dst)[i] = kernels::f32_to_f16(v);
  }
}

template <DType S>
void convert_from(const unsigned char* src, void* dst, DType to, int64_t n) {
  switch (to) {
    case DType::f32: return convert<S, DType::f32>(src, dst, n);
    case DType::bf16: return convert<S, DType::bf16>(src, dst, n);
    case DType::f16: return convert<S, DType::f16>(src, dst, n);
  }
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * static_cast<size_t>(kernels::dtype_size(from)));
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  switch (from) {
    case DType::f32: return convert_from<DType::f32>(s, dst, to, n);
    case DType::bf16: return convert_from<DType::bf16>(s, dst, to, n);
    case DType::f16: return convert_from<DType::f16>(s, dst, to, n);
  }
}

}  // namespace fuselm::weights
