#pragma once
// Elementwise ATen arithmetic over strided views with PyTorch broadcasting (aten.add/mul/...,
// comparisons, where, masked_fill, the unary math functions).
//
//   binary(fn, alpha, a, b, out):  out = fn(a, b) with a and b broadcast (right-aligned) to out's
//     shape, out contiguous. f32 out with f32 operands (or 0-d f64 scalars, read once as f32):
//     computed in fp32 (`float` arithmetic, as the ATen CPU kernels); any other dtype mix through
//     doubles (load_double / store_double of strided.h: integer positions, masks).
//     alpha is add's and rsub's scale (add: a + alpha·b, rsub: b − alpha·a; ignored otherwise).
//   where(cond, a, b, out):  out = cond != 0 ? a : b, all three broadcast to out (through doubles).
//   masked_fill(mask, v, out):  out[i] = v where the broadcast mask is non-zero (out already holds
//     the input).
//   unary(fn, x, out, p0, p1):  out = fn(x), x any strides, out contiguous of x's shape. f32 → f32
//     contiguous: the vectorised kernel of activation.h where there is one (exp, tanh, sigmoid, silu,
//     gelu, gelu_tanh), else fn in double per element cast to f32; other dtypes through doubles.
//   clamp(x, lo, hi, out):  see below.
// Rows of the last dimension split over the thread pool for large outputs (strided.h).
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

enum class BinaryFn : unsigned char {
  add, rsub, mul, div, div_floor, div_trunc, square, pow, maximum, minimum,  // maximum/minimum: NaN wins
  pow_double,  // std::pow in double on every path (aten.pow.Scalar, as it always computed)
  eq, ne, lt, le, gt, ge, bitwise_and, bitwise_or, logical_and,
};

enum class UnaryFn : unsigned char {
  neg, abs, rsqrt, sqrt, reciprocal, exp, log, sin, cos, erf, floor, logical_not, bool_not, bitwise_not,
  tanh, sigmoid, silu, relu, gelu, gelu_tanh, square, expm1,
  softplus,  // log1p(exp(beta x)) / beta, or x where beta x > threshold (p0 = beta, p1 = threshold)
};

void binary(BinaryFn fn, double alpha, const Strided& a, const Strided& b, const Strided& out);
void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out);
void masked_fill(const Strided& mask, double v, const Strided& out);
void unary(UnaryFn fn, const Strided& x, const Strided& out, double p0 = 0, double p1 = 0);
/// out = clamp(x, lo, hi) in double (torch.clamp: NaN in x or a bound gives NaN); lo / hi null
/// when absent, else broadcast to out. out is contiguous, or x itself (in place, x's strides).
void clamp(const Strided& x, const Strided* lo, const Strided* hi, const Strided& out);

}  // namespace fuselm::kernels
