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
//   unary(fn, x, out, p0, p1):  out = fn(x) (p0, p1: softplus's beta and threshold), x any strides, out contiguous of x's shape. f32 → f32
//     contiguous: the vectorised kernel of activation.h where there is one (exp, tanh, sigmoid, silu,
//     gelu, gelu_tanh), else fn in double per element cast to f32; other dtypes through doubles.
//   clamp(x, lo, hi, out):  see below.
// Rows of the last dimension split over the thread pool for large outputs (strided.h).
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

/// The inverse error function in double (torch.erfinv): x with erf(x) = y for y in [-1, 1]; ±inf at
/// ±1, NaN outside [-1, 1] and for NaN. Giles' single-precision approximation ("Approximating the
/// erfinv function", GPU Computing Gems, 2011) refined by two Newton steps on std::erf.
double erfinv(double y);

// The binary functions, one entry each: X(name, fp32 path, value). `value` is fn(x, y) with x and
// y both float (the fp32 path, where it is allowed) or both double, and `alpha` a double. Only
// elementwise.cc expands the values.
#define FUSELM_BINARY_FNS(X)                                                                          \
  X(add, true, x + static_cast<decltype(x)>(alpha) * y) /* sub: alpha -1 */                          \
  X(rsub, true, y - alpha * x)                                                                        \
  X(mul, true, x * y)                                                                                 \
  X(div, true, x / y)                                                                                 \
  X(div_floor, true, std::floor(x / y))                                                               \
  X(div_trunc, true, std::trunc(x / y))                                                               \
  X(square, true, x * x)                                                                              \
  X(pow, true, std::pow(x, y))                                                                        \
  X(pow_double, false, std::pow(x, y)) /* aten.pow.Scalar: in double, as it always computed */       \
  X(maximum, true, (x != x || x > y) ? x : y) /* NaN from either side propagates */                  \
  X(minimum, true, (x != x || x < y) ? x : y)                                                         \
  X(eq, true, x == y)                                                                                 \
  X(ne, true, x != y)                                                                                 \
  X(lt, true, x < y)                                                                                  \
  X(le, true, x <= y)                                                                                 \
  X(gt, true, x > y)                                                                                  \
  X(ge, true, x >= y)                                                                                 \
  X(bitwise_and, true, static_cast<double>(static_cast<int64_t>(x) & static_cast<int64_t>(y)))        \
  X(bitwise_or, true, static_cast<double>(static_cast<int64_t>(x) | static_cast<int64_t>(y)))         \
  X(logical_and, true, (x != 0) && (y != 0))

// The unary functions: X(name, value in double of x (p0, p1: the op's parameters), the contiguous
// fp32 kernel of activation.h or nullptr).
#define FUSELM_UNARY_FNS(X)                                                                           \
  X(neg, -x, nullptr)                                                                                 \
  X(abs, std::fabs(x), nullptr)                                                                       \
  X(rsqrt, 1.0 / std::sqrt(x), nullptr)                                                               \
  X(sqrt, std::sqrt(x), nullptr)                                                                      \
  X(reciprocal, 1.0 / x, nullptr)                                                                     \
  X(exp, std::exp(x), unary_exp_f32)                                                                  \
  X(log, std::log(x), nullptr)                                                                        \
  X(sin, std::sin(x), nullptr)                                                                        \
  X(cos, std::cos(x), nullptr)                                                                        \
  X(erf, std::erf(x), nullptr)                                                                        \
  X(erfinv, erfinv(x), nullptr)                                                                       \
  X(floor, std::floor(x), nullptr)                                                                    \
  X(logical_not, x == 0.0, nullptr)                                                                   \
  X(bool_not, x == 0.0 ? 1.0 : 0.0, nullptr)                                                          \
  X(bitwise_not, static_cast<double>(~static_cast<int64_t>(x)), nullptr)                              \
  X(tanh, std::tanh(x), unary_tanh_f32)                                                               \
  X(sigmoid, 1.0 / (1.0 + std::exp(-x)), unary_sigmoid_f32)                                           \
  X(silu, x / (1.0 + std::exp(-x)), unary_silu_f32)                                                   \
  X(relu, x > 0 ? x : 0.0, nullptr)                                                                   \
  X(gelu, 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))), unary_gelu_f32)                             \
  X(gelu_tanh, 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))),       \
    unary_gelu_tanh_f32)                                                                              \
  X(square, x * x, nullptr)                                                                           \
  X(expm1, std::expm1(x), nullptr)                                                                    \
  X(softplus, x * p0 > p1 ? x : std::log1p(std::exp(p0 * x)) / p0, nullptr) /* p0 beta, p1 threshold */

#define FUSELM_FN_NAME(name, ...) name,
enum class BinaryFn : unsigned char { FUSELM_BINARY_FNS(FUSELM_FN_NAME) };
enum class UnaryFn : unsigned char { FUSELM_UNARY_FNS(FUSELM_FN_NAME) };
#undef FUSELM_FN_NAME

void binary(BinaryFn fn, double alpha, const Strided& a, const Strided& b, const Strided& out);
void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out);
void masked_fill(const Strided& mask, double v, const Strided& out);
void unary(UnaryFn fn, const Strided& x, const Strided& out, double p0 = 0, double p1 = 0);
/// out = clamp(x, lo, hi) in double (torch.clamp: NaN in x or a bound gives NaN); lo / hi null
/// when absent, else broadcast to out. out is contiguous, or x itself (in place, x's strides).
void clamp(const Strided& x, const Strided* lo, const Strided* hi, const Strided& out);

}  // namespace fuselm::kernels
