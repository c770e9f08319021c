#pragma once
// Copies between strided views (contiguous, clone, dtype casts, cat/stack parts, reshape copies),
// fills and row gathers (select_rows).
//
//   copy_strided(src, dst):  dst[i...] = convert(src[i...]) over dst's shape (src has the same
//     shape; any strides, any dtypes of strided.h, conversions as a C++ cast, bool: != 0). Equal
//     dtypes and both contiguous: one memcpy; f32/bf16/f16 both contiguous: convert_dtype (dtype.h);
//     into f32 from those: a row loop without doubles. Parallel over rows for large copies.
//   fill(dst, v):  every element of the contiguous dst set to v (converted as store_double).
//   arange(dst, start, step):  dst[i] = start + i·step (computed in double) over the contiguous dst.
//   gather_dim(x, dim, map, out):  out[.., j, ..] = x[.., map[j], ..] along `dim` (out contiguous,
//     x's shape but out.shape[dim] entries of map, each in [0, x.shape[dim])), through doubles
//     (index_select, repeat_interleave).
//   gather_rows(src, row_bytes, rows, n, dst):  row r of dst = row rows[r] of src (byte rows of
//     equal size; the caller has checked every index).
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

void copy_strided(const Strided& src, const Strided& dst);
void fill(const Strided& dst, double v);
void arange(const Strided& dst, double start, double step);
void gather_dim(const Strided& x, int dim, const int64_t* map, const Strided& out);
void gather_rows(const void* src, size_t row_bytes, const int64_t* rows, int64_t n, void* dst);

}  // namespace fuselm::kernels
