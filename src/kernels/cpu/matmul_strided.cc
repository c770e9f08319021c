#include "kernels/cpu/matmul_strided.h"

namespace fuselm::kernels {

void matmul_strided(const Strided& a, const Strided& b, const int64_t* batch, int nb, float* out) {
  const int64_t M = a.shape[a.ndim - 2], K = a.shape[a.ndim - 1], N = b.shape[b.ndim - 1];
  const int64_t am = a.strides[a.ndim - 2], ak = a.strides[a.ndim - 1];
  const int64_t bk = b.strides[b.ndim - 2], bn = b.strides[b.ndim - 1];
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= batch[d];
  const int nt = kernel_threads(batches * M * N * K, int64_t{1} << 14);
  parallel_for_ranges(nt, batches * M, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / M, m = row % M;
      int64_t oa = 0, ob = 0;
      int64_t rem = bi;
      for (int d = nb - 1; d >= 0; --d) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        oa += idx * a.strides[d];
        ob += idx * b.strides[d];
      }
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += load_double(a, oa + m * am + k * ak) * load_double(b, ob + k * bk + n * bn);
        out[(bi * M + m) * N + n] = static_cast<float>(acc);
      }
    }
  });
}

void scale_add(double alpha, double beta, const Strided& bias, const Strided& out) {
  const auto sb = broadcast_strides(bias, out);
  const int nd = out.ndim;
  const int64_t inner = out.inner(), ib = nd ? sb[nd - 1] : 0;
  float* o = out.ptr<float>();
  parallel_rows<1>(out.shape, nd, {&sb}, [&](int64_t row, const std::array<int64_t, 1>& off) {
    for (int64_t k = 0; k < inner; ++k) {
      float& v = o[row * inner + k];
      v = static_cast<float>(alpha * v + (beta == 0.0 ? 0.0 : beta * load_double(bias, off[0] + k * ib)));
    }
  });
}

}  // namespace fuselm::kernels
