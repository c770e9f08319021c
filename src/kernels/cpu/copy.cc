#include "kernels/cpu/copy.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

namespace {

// One row of `inner` elements, strides s_in / d_in: into f32 from f32, bf16 or f16 without
// doubles (to_f32), any other pair through load_double / store_double.
void copy_row(const Strided& src, const Strided& dst, const std::array<int64_t, 2>& off, int64_t inner, int64_t s_in,
              int64_t d_in, bool to_f32) {
  if (!to_f32) {
    for (int64_t k = 0; k < inner; ++k) store_double(dst, off[1] + k * d_in, load_double(src, off[0] + k * s_in));
    return;
  }
  float* o = dst.ptr<float>() + off[1];
  if (src.dtype == DType::f32) {
    const float* s = src.ptr<float>() + off[0];
    for (int64_t k = 0; k < inner; ++k) o[k * d_in] = s[k * s_in];
  } else {
    for (int64_t k = 0; k < inner; ++k) o[k * d_in] = load_as_f32(src.data, src.dtype, off[0] + k * s_in);
  }
}

}  // namespace

void copy_strided(const Strided& src, const Strided& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const size_t esize = dtype_size(src.dtype);
  const bool contiguous = src.contiguous() && dst.contiguous();
  if (src.dtype == dst.dtype && contiguous) {
    const int nt = kernel_threads(n, int64_t{1} << 16);
    parallel_for_ranges(nt, n, 16, [&](int64_t b, int64_t e) {
      std::memcpy(static_cast<char*>(dst.data) + b * esize, static_cast<const char*>(src.data) + b * esize,
                  (e - b) * esize);
    });
    return;
  }
  // Between f32, bf16 and f16 (a hybrid's bf16 conv weight widened per call, a .float()) the
  // conversions give the values the double path would: bf16/f16 -> f32 is exact, and f32 ->
  // bf16/f16 rounds to nearest even either way.
  const bool storage = storage_dtype(src.dtype) && storage_dtype(dst.dtype);
  if (storage && contiguous) return convert_dtype(src.data, src.dtype, dst.data, dst.dtype, n);
  const int nd = dst.ndim;
  const int64_t inner = dst.inner();
  const int64_t s_in = nd ? src.strides[nd - 1] : 0, d_in = nd ? dst.strides[nd - 1] : 0;
  const bool to_f32 = storage && dst.dtype == DType::f32;
  parallel_rows<2>(dst.shape, nd, {&src.strides, &dst.strides}, [&](int64_t, const std::array<int64_t, 2>& off) {
    copy_row(src, dst, off, inner, s_in, d_in, to_f32);
  });
}

void fill(const Strided& dst, double v) {
  const int64_t n = dst.numel();
  const int nt = strided_threads(n);
  if (dst.dtype == DType::f32) {
    const float f = static_cast<float>(v);
    parallel_for_ranges(nt, n, 16, [&](int64_t b, int64_t e) { std::fill(dst.ptr<float>() + b, dst.ptr<float>() + e, f); });
  } else {
    parallel_for_ranges(nt, n, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) store_double(dst, i, v);
    });
  }
}

void arange(const Strided& dst, double start, double step) {
  const int64_t n = dst.numel();
  parallel_for_ranges(strided_threads(n), n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) store_double(dst, i, start + i * step);
  });
}

void gather_dim(const Strided& x, int dim, const int64_t* map, const Strided& out) {
  const int nd = out.ndim;
  const int64_t n = out.numel();
  parallel_for_ranges(strided_threads(n), n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i, off = 0;
      for (int k = nd - 1; k >= 0; --k) {
        const int64_t pos = rem % out.shape[k];
        rem /= out.shape[k];
        off += (k == dim ? map[pos] : pos) * x.strides[k];
      }
      store_double(out, i, load_double(x, off));
    }
  });
}

void gather_rows(const void* src, size_t row_bytes, const int64_t* rows, int64_t n, void* dst) {
  const int nt = kernel_threads(n * static_cast<int64_t>(row_bytes), int64_t{1} << 16);
  parallel_for_ranges(nt, n, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::memcpy(static_cast<char*>(dst) + r * row_bytes, static_cast<const char*>(src) + rows[r] * row_bytes,
                  row_bytes);
  });
}

}  // namespace fuselm::kernels
