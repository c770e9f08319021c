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
#include <array>
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

enum class ReduceFn : unsigned char { sum, mean, amax };

void reduce(ReduceFn fn, const Strided& x, const std::array<bool, kMaxStridedDims>& reduced, const Strided& out);
void softmax(const Strided& x, const Strided& out, int dim);
void cumsum(const Strided& x, const Strided& out, int dim);
void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t width, double eps);

}  // namespace fuselm::kernels
