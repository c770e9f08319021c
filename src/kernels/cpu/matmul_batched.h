#pragma once
// matmul_batched: C[b] = A[b] · B[b] for fp32 activations (aten.bmm / aten.matmul of two
// activations, e.g. rope's inv_freq @ positions, or q @ kᵀ in an unfused attention).
//
//   A[b, i, p] = a[off_a(b) + i*a_row_stride + p*a_col_stride]     i < m, p < k
//   B[b, p, j] = b[off_b(b) + p*b_row_stride + j*b_col_stride]     j < n
//   C[b, i, j] = c[off_c(b) + i*c_row_stride + j*c_col_stride] = sum_p A[b,i,p] · B[b,p,j]
//   off_x(b) = sum_d b_d · x_batch_strides[d] over the batch_dims batch indices (sizes batch[d]).
// Strides are in elements and may be 0 (broadcast) for A and B; C's must address distinct
// elements, and C must not overlap A or B. fp32 accumulation. Unit-stride operands run on the
// linear kernels (nk or kn layout); other strides take a simple loop.
#include <cstdint>

namespace fuselm::kernels {

inline constexpr int kMatmulMaxBatchDims = 6;

struct MatmulBatchedArgs {
  int64_t m = 0, n = 0, k = 0;
  int batch_dims = 0;
  int64_t batch[kMatmulMaxBatchDims] = {};
  const float* a = nullptr;
  int64_t a_batch_strides[kMatmulMaxBatchDims] = {};
  int64_t a_row_stride = 0, a_col_stride = 0;
  const float* b = nullptr;
  int64_t b_batch_strides[kMatmulMaxBatchDims] = {};
  int64_t b_row_stride = 0, b_col_stride = 0;
  float* c = nullptr;
  int64_t c_batch_strides[kMatmulMaxBatchDims] = {};
  int64_t c_row_stride = 0, c_col_stride = 0;
};

/// Throws std::invalid_argument on bad sizes, too many batch dims or null pointers.
void matmul_batched(const MatmulBatchedArgs& args);

}  // namespace fuselm::kernels
