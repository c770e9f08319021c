#pragma once
// Strided views for the generic ATen kernels (elementwise, reductions, copies, gathers): the
// memory of a tensor as dtype, shape and strides in elements, any of the engine's dtypes (one
// DType, base/dtype.h). runtime::Tensor converts to one (runtime/ops/common.h, `view`).
//
// Kernels walk a view in rows of its last dimension; large walks split their rows over the
// thread pool (threading.h), each row computed by one thread, so results do not depend on the
// thread count.
#include <array>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {

using fuselm::DType;

/// Most dimensions a strided view has (runtime::kMaxDims is the same number).
inline constexpr int kMaxStridedDims = 8;

/// `ndim` sizes and strides (elements, may be 0 for broadcast or negative) over `data` of `dtype`.
struct Strided {
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxStridedDims> shape{};
  std::array<int64_t, kMaxStridedDims> strides{};

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  /// Row-major dense (size-1 dims may have any stride), as runtime::Tensor::is_contiguous.
  bool contiguous() const {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expect) return false;
      expect *= shape[d];
    }
    return true;
  }
  /// Size of the last dimension (1 for a 0-d view).
  int64_t inner() const { return ndim ? shape[ndim - 1] : 1; }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
};

/// Element `offset` (in elements, strides applied by the caller) of `data` of dtype `dt` as a
/// double; f32/f64/bf16/f16/i64/i32/i16/i8/u8/bool. Throws std::runtime_error for other dtypes.
double load_double(const void* data, DType dt, int64_t offset);
/// Stores v at element `offset` of `data` of dtype `dt` (the conversion of a C++ cast; bool: v != 0).
void store_double(void* data, DType dt, int64_t offset, double v);

inline double load_double(const Strided& t, int64_t offset) { return load_double(t.data, t.dtype, offset); }
inline void store_double(const Strided& t, int64_t offset, double v) { store_double(t.data, t.dtype, offset, v); }

/// Strides of `t` broadcast (right-aligned, numpy/PyTorch rules) to `out`'s shape: 0 where t has
/// no such dim or size 1. The caller has checked that the shapes broadcast.
std::array<int64_t, kMaxStridedDims> broadcast_strides(const Strided& t, const Strided& out);

/// Offset under `strides` of the element `linear` of a row-major walk over `shape`'s shape.
inline int64_t offset_of(int64_t linear, const Strided& shape, const std::array<int64_t, kMaxStridedDims>& strides) {
  int64_t off = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    off += (linear % shape.shape[d]) * strides[d];
    linear /= shape.shape[d];
  }
  return off;
}

/// Threads for a walk of `elements` (at least 16384 elements per thread).
inline int strided_threads(int64_t elements) { return kernel_threads(elements, int64_t{1} << 14); }

/// Calls f(row, offsets) for rows [begin, end) of a row-major walk over the first nd-1 dims of
/// `shape`, where offsets[k] is the element offset of the row's first element under strides[k].
template <int N, class F>
void walk_rows(const std::array<int64_t, kMaxStridedDims>& shape, int nd,
               const std::array<const std::array<int64_t, kMaxStridedDims>*, N>& strides, int64_t begin,
               int64_t end, F&& f) {
  std::array<int64_t, kMaxStridedDims> idx{};
  int64_t rem = begin;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
  }
  for (int64_t row = begin; row < end; ++row) {
    std::array<int64_t, N> off{};
    for (int d = 0; d < nd - 1; ++d)
      for (int k = 0; k < N; ++k) off[k] += idx[d] * (*strides[k])[d];
    f(row, off);
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

/// walk_rows over all rows of `shape` (numel / last dim), the rows split over the thread pool when
/// the walk is large.
template <int N, class F>
void parallel_rows(const std::array<int64_t, kMaxStridedDims>& shape, int nd,
                   const std::array<const std::array<int64_t, kMaxStridedDims>*, N>& strides, F&& f) {
  int64_t rows = 1, inner = nd ? shape[nd - 1] : 1;
  for (int d = 0; d + 1 < nd; ++d) rows *= shape[d];
  if (rows == 0 || inner == 0) return;
  const int nt = strided_threads(rows * inner);
  parallel_for_ranges(nt, rows, 1, [&](int64_t b, int64_t e) { walk_rows<N>(shape, nd, strides, b, e, f); });
}

}  // namespace fuselm::kernels
