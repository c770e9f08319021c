#pragma once
// linear: y = x · Wᵀ + bias (nn.Linear), or y = x · W + bias (Conv1D / addmm layout).
//
//   x     fp32 [m, k], row stride lda (>= k)                 activations, any view with unit column stride
//   w     [n, k] row stride ldw (>= k)   for WeightLayout::nk  (nn.Linear.weight)
//         [k, n] row stride ldw (>= n)   for WeightLayout::kn  (GPT-2 Conv1D.weight, addmm's mat2)
//         dtype f32, bf16 or f16 (raw bits, see dtype.h)
//   bias  fp32 [n] or nullptr
//   y     fp32 [m, n], row stride ldy (>= n)
//   y[i, j] = bias[j] + sum_p x[i, p] · W(j, p),  W(j, p) = w[j*ldw + p] (nk) or w[p*ldw + j] (kn)
//
// Accumulation is fp32 (weights are widened exactly). A stride of 0 means dense (lda = k,
// ldy = n, ldw = k for nk or n for kn). y must not overlap x, w or bias. k = 0 gives y = bias (or 0).
//
// Decode-sized m (<= 8 rows per pass) streams W once for all rows (memory-bound GEMV); larger m
// runs a blocked GEMM that packs fp32 panels of W per call into per-thread scratch. Threads
// (OpenMP, at most omp_get_max_threads(), one when called inside a parallel region) split the
// output columns, or the rows when n is too narrow.
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

enum class WeightLayout : unsigned char {
  nk,  // w[n, k]: PyTorch nn.Linear
  kn,  // w[k, n]: GPT-2 Conv1D, torch.addmm / matmul with a [k, n] right operand
};

struct LinearArgs {
  const float* x = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  DType w_dtype = DType::f32;
  WeightLayout w_layout = WeightLayout::nk;
  int64_t ldw = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;
};

/// Throws std::invalid_argument on inconsistent arguments (null pointers, strides below widths).
void linear(const LinearArgs& args);

}  // namespace fuselm::kernels
