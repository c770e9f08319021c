#pragma once
// Reductions of the generic ATen ops over strided views, accumulated in double (aten.sum, mean,
// amax, softmax, cumsum, layer_norm as captured, not the fused fuselm.rms_norm of norm.h).
//
//   reduce(fn, x, reduced, out):  out = fn over the dims d of x with reduced[d] (out contiguous, its
//     elements in the row-major order of x's kept dims). Reducing trailing dims of a contiguous f32
//     x into f32 out: one row per output, rows split over the thread pool; otherwise one walk
//     over x through doubles. mean divides by the count of reduced elements; amax starts at -inf.
//   softmax(x, out, dim):  x and out contiguous f32 of one shape; rows along `dim` (elements
//     `inner` apart): max-subtracted exp, sum in double.
//   cumsum(x, out, dim):  x contiguous f64, out contiguous of x's shape (any dtype of strided.h).
//   layer_norm(x, w, b, out, rows, width, eps):  x, out [rows, width] contiguous f32; w, b [width]
//     f32 or null; mean and biased variance in double.
//   row_sum_squares(x, rows, width, out):  out[i] = sum_j x[i, j]^2 (double accumulation, stored as
//     f32), x [rows, width] contiguous f32: the local part of an RMS statistic whose row is split
//     over tensor-parallel ranks (fuselm.rms_norm_split, runtime/ops/dist_ops.cc).
//   rms_scale_rows(x, rows, width, sums, full_width, eps, w, offset, out):  out[i, j] = x[i, j] ·
//     1/sqrt(sums[i] / full_width + eps) · (w[j] + offset) (w null: 1), fp32, as fuselm.rms_norm.
#include <array>
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

enum class ReduceFn : unsigned char { sum, mean, amax };

void reduce(ReduceFn fn, const Strided& x, const std::array<bool, kMaxStridedDims>& reduced, const Strided& out);
void softmax(const Strided& x, const Strided& out, int dim);
void cumsum(const Strided& x, const Strided& out, int dim);
void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t width, double eps);
void row_sum_squares(const float* x, int64_t rows, int64_t width, float* out);
void rms_scale_rows(const float* x, int64_t rows, int64_t width, const float* sums, int64_t full_width, float eps,
                    const float* w, float offset, float* out);

}  // namespace fuselm::kernels
