#include "kernels/cpu/dtype.h"

#include <cstring>

#include "kernels/cpu/threading.h"

namespace fuselm::kernels {

namespace {

/// Element i of `src` as fp32, read byte-wise: mapped checkpoint tensors may be misaligned (on x86
/// this is the same load as an aligned one).
template <DType S>
float load_unaligned(const void* src, int64_t i) {
  const auto* p = static_cast<const unsigned char*>(src);
  if constexpr (S == DType::f32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return S == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

template <DType S, DType D>
void convert_range(const void* src, void* dst, int64_t begin, int64_t end) {
  if constexpr (S == D) {
    std::memcpy(static_cast<char*>(dst) + begin * dtype_size(D),
                static_cast<const char*>(src) + begin * dtype_size(S),
                static_cast<size_t>(end - begin) * dtype_size(D));
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const float v = load_unaligned<S>(src, i);
      if constexpr (D == DType::f32) static_cast<float*>(dst)[i] = v;
      if constexpr (D == DType::bf16) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
      if constexpr (D == DType::f16) static_cast<uint16_t*>(dst)[i] = f32_to_f16(v);
    }
  }
}

template <DType S>
void convert_range_to(DType d, const void* src, void* dst, int64_t begin, int64_t end) {
  switch (d) {
    case DType::f32: return convert_range<S, DType::f32>(src, dst, begin, end);
    case DType::bf16: return convert_range<S, DType::bf16>(src, dst, begin, end);
    case DType::f16: return convert_range<S, DType::f16>(src, dst, begin, end);
    default: return;  // not a storage dtype: the callers check
  }
}

void convert_range_any(DType s, DType d, const void* src, void* dst, int64_t begin, int64_t end) {
  switch (s) {
    case DType::f32: return convert_range_to<DType::f32>(d, src, dst, begin, end);
    case DType::bf16: return convert_range_to<DType::bf16>(d, src, dst, begin, end);
    case DType::f16: return convert_range_to<DType::f16>(d, src, dst, begin, end);
    default: return;
  }
}

}  // namespace

void convert_dtype(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (n <= 0) return;
  const int nt = kernel_threads(n, /*min_work_per_thread=*/1 << 16);
  parallel_for_ranges(nt, n, /*align=*/64, [&](int64_t b, int64_t e) {
    convert_range_any(src_dtype, dst_dtype, src, dst, b, e);
  });
}

}  // namespace fuselm::kernels
