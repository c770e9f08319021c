#include "kernels/cpu/activation.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/activation_impl.h"
#include "isa/activation_tables.inc"

namespace fuselm::kernels {

const ActivationKernels kActivationKernelsGeneric = make_activation_kernels<Isa::generic>();

namespace {

const ActivationKernels& activation_kernels() {
  return isa_kernels<ActivationKernels>();
}

constexpr int64_t kMinElementsPerThread = 1 << 14;

void unary(UnaryOp op, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  if (!x || !y) throw std::invalid_argument("unary_*_f32: null pointer");
  const ActivationKernels& kern = activation_kernels();
  const int nt = kernel_threads(n, kMinElementsPerThread);
  parallel_for_ranges(nt, n, /*align=*/64,
                      [&](int64_t b, int64_t e) { kern.unary(op, x + b, y + b, e - b); });
}

}  // namespace

const char* act_name(Act act) {
  switch (act) {
    case Act::silu: return "silu";
    case Act::gelu: return "gelu";
    case Act::gelu_tanh: return "gelu_tanh";
  }
  return "?";
}

void unary_exp_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::exp, x, y, n); }
void unary_tanh_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::tanh, x, y, n); }
void unary_sigmoid_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::sigmoid, x, y, n); }
void unary_silu_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::silu, x, y, n); }
void unary_gelu_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::gelu, x, y, n); }
void unary_gelu_tanh_f32(const float* x, float* y, int64_t n) { unary(UnaryOp::gelu_tanh, x, y, n); }

void act_and_mul(Act act, const float* a, int64_t lda, const float* b, int64_t ldb, float* y,
                 int64_t ldy, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  if (!a || !b || !y) throw std::invalid_argument("act_and_mul: null pointer");
  if (lda < width || ldb < width || ldy < width)
    throw std::invalid_argument(
        fmt::format("act_and_mul: strides lda={} ldb={} ldy={} below width {}", lda, ldb, ldy, width));
  const ActivationKernels& kern = activation_kernels();
  const int nt = kernel_threads(rows * width, kMinElementsPerThread);
  if (rows >= nt) {
    parallel_for_ranges(nt, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kern.act_and_mul(act, a + r * lda, b + r * ldb, y + r * ldy, width);
    });
  } else {
    // few wide rows (decode): split each row's columns
    for (int64_t r = 0; r < rows; ++r)
      parallel_for_ranges(nt, width, 64, [&](int64_t c0, int64_t c1) {
        kern.act_and_mul(act, a + r * lda + c0, b + r * ldb + c0, y + r * ldy + c0, c1 - c0);
      });
  }
}

}  // namespace fuselm::kernels
