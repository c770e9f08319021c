#pragma once
// Fast contiguous fp32 activations, and the fused act-and-mul of GLU blocks.
//
//   unary_<op>_f32(x, y, n):  y[i] = op(x[i]) for i < n; y may equal x (in place), no other overlap.
//     exp        e^x                                    (overflow -> inf, NaN -> NaN)
//     tanh       tanh(x)
//     sigmoid    1 / (1 + e^-x)
//     silu       x · sigmoid(x)                          torch.nn.functional.silu
//     gelu       x/2 · (1 + erf(x/√2))                   gelu(approximate="none")
//     gelu_tanh  x/2 · (1 + tanh(√(2/π)(x + 0.044715x³)))  gelu(approximate="tanh"),
//                computed as x · sigmoid(2u) (the same function, without the cancellation of 1+tanh)
//   Accuracy vs double: a few ulp (see simd_math.h). Parallel over chunks for large n.
//
//   act_and_mul(act, a, lda, b, ldb, y, ldy, rows, width):
//     y[r, i] = act(a[r, i]) · b[r, i]  for r < rows, i < width
//     the GLU of a fused [gate | up] GEMM output: a = out, b = out + width, lda = ldb = 2·width.
//     y may equal a or b (in place); rows independent.
#include <cstdint>

namespace fuselm::kernels {

enum class Act : unsigned char { silu, gelu, gelu_tanh };

const char* act_name(Act act);

void unary_exp_f32(const float* x, float* y, int64_t n);
void unary_tanh_f32(const float* x, float* y, int64_t n);
void unary_sigmoid_f32(const float* x, float* y, int64_t n);
void unary_silu_f32(const float* x, float* y, int64_t n);
void unary_gelu_f32(const float* x, float* y, int64_t n);
void unary_gelu_tanh_f32(const float* x, float* y, int64_t n);

void act_and_mul(Act act, const float* a, int64_t lda, const float* b, int64_t ldb, float* y,
                 int64_t ldy, int64_t rows, int64_t width);

}  // namespace fuselm::kernels
