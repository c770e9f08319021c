#pragma once
// Selections along one dim of a strided view (aten.topk, aten.max.dim): per line of x along `dim`,
// through doubles; lines split over the thread pool.
//
//   topk(x, dim, k, largest, vals, idx):  the k largest (or smallest) of each line, sorted; ties keep
//     the lower index first; NaN counts as the largest value (PyTorch). vals (x's dtype) and idx (i64)
//     have x's shape with k along dim, any strides.
//   max_dim(x, dim, vals, idx):  the maximum of each line and the index of its first occurrence (a
//     NaN is the maximum); vals and idx contiguous, one element per line in the row-major order of
//     x's other dims. The line must not be empty.
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

void topk(const Strided& x, int dim, int64_t k, bool largest, const Strided& vals, const Strided& idx);
void max_dim(const Strided& x, int dim, const Strided& vals, const Strided& idx);

}  // namespace fuselm::kernels
