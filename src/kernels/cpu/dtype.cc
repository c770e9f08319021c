#include "kernels/cpu/dtype.h"

#include <cstring>

#include "kernels/cpu/threading.h"

namespace fuselm::kernels {

namespace {

template <DType S, DType D>
void convert_range(const void* src, void* dst, int64_t begin, int64_t end) {
  if constexpr (S == D) {
    std::memcpy(static_cast<char*>(dst) + begin * dtype_size(D),
                static_cast<const char*>(src) + begin * dtype_size(S),
                static_cast<size_t>(end - begin) * dtype_size(D));
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const float v = load_as_f32(src, S, i);
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
