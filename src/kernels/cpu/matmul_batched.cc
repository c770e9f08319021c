#include "kernels/cpu/matmul_batched.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

struct Mat {
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
};

// One batch: C = A · B.
void matmul_one(const Mat& s, const float* a, const float* b, float* c) {
  const bool linear_ok = s.a_cs == 1 && s.c_cs == 1 && s.a_rs >= s.k && s.c_rs >= s.n;
  if (linear_ok && s.b_cs == 1 && s.b_rs >= s.n) {  // B is [k, n] row-major
    linear({.x = a, .lda = s.a_rs, .w = b, .w_dtype = DType::f32, .w_layout = WeightLayout::kn,
            .ldw = s.b_rs, .y = c, .ldy = s.c_rs, .m = s.m, .n = s.n, .k = s.k});
    return;
  }
  if (linear_ok && s.b_rs == 1 && s.b_cs >= s.k) {  // Bᵀ is [n, k] row-major
    linear({.x = a, .lda = s.a_rs, .w = b, .w_dtype = DType::f32, .w_layout = WeightLayout::nk,
            .ldw = s.b_cs, .y = c, .ldy = s.c_rs, .m = s.m, .n = s.n, .k = s.k});
    return;
  }
  const int nt = kernel_threads(s.m * s.n * s.k, int64_t{1} << 16);
  parallel_for_ranges(nt, s.m, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0.f;
        for (int64_t p = 0; p < s.k; ++p) acc += a[i * s.a_rs + p * s.a_cs] * b[p * s.b_rs + j * s.b_cs];
        c[i * s.c_rs + j * s.c_cs] = acc;
      }
  });
}

}  // namespace

void matmul_batched(const MatmulBatchedArgs& x) {
  if (x.m < 0 || x.n < 0 || x.k < 0)
    throw std::invalid_argument(
        fmt::format("matmul_batched: negative size m={} n={} k={}", x.m, x.n, x.k));
  if (x.batch_dims < 0 || x.batch_dims > kMatmulMaxBatchDims)
    throw std::invalid_argument(fmt::format("matmul_batched: {} batch dims (at most {})",
                                            x.batch_dims, kMatmulMaxBatchDims));
  int64_t batches = 1;
  for (int d = 0; d < x.batch_dims; ++d) {
    if (x.batch[d] < 0)
      throw std::invalid_argument(fmt::format("matmul_batched: batch dim {} is {}", d, x.batch[d]));
    batches *= x.batch[d];
  }
  if (batches == 0 || x.m == 0 || x.n == 0) return;
  if (!x.c || (x.k > 0 && (!x.a || !x.b)))
    throw std::invalid_argument("matmul_batched: null pointer");

  // Strides along a dimension of size 1 are irrelevant: make them the ones the fast paths want.
  Mat s{x.m, x.n, x.k, x.a_row_stride, x.a_col_stride, x.b_row_stride,
        x.b_col_stride, x.c_row_stride, x.c_col_stride};
  if (s.k == 1) s.a_cs = 1, s.b_rs = s.n;
  if (s.n == 1) s.b_cs = 1, s.c_cs = 1;
  if (s.m == 1) s.a_rs = s.k, s.c_rs = s.n;
  if (s.k == 1 && s.n == 1) s.b_rs = 1;

  auto offsets = [&](int64_t flat, int64_t& oa, int64_t& ob, int64_t& oc) {
    oa = ob = oc = 0;
    for (int d = x.batch_dims - 1; d >= 0; --d) {
      const int64_t i = flat % x.batch[d];
      flat /= x.batch[d];
      oa += i * x.a_batch_strides[d];
      ob += i * x.b_batch_strides[d];
      oc += i * x.c_batch_strides[d];
    }
  };
  auto run = [&](int64_t flat) {
    int64_t oa, ob, oc;
    offsets(flat, oa, ob, oc);
    if (s.k == 0) {
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) x.c[oc + i * s.c_rs + j * s.c_cs] = 0.f;
      return;
    }
    matmul_one(s, x.a + oa, x.b + ob, x.c + oc);
  };

  // Many small products: one per thread at a time (the kernels inside then run serially).
  const int nt = kernel_threads(batches * s.m * s.n * std::max<int64_t>(1, s.k), int64_t{1} << 16);
  if (batches >= 2 * nt && nt > 1) {
    parallel_for_dynamic(nt, batches, run);
  } else {
    for (int64_t bi = 0; bi < batches; ++bi) run(bi);
  }
}

}  // namespace fuselm::kernels
