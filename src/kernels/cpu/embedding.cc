#include "kernels/cpu/embedding.h"

#include <algorithm>

#include "kernels/cpu/quant_weight.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {

int64_t embedding_lookup(const EmbeddingArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t id = a.ids[i], row = id - a.first;
    if ((row < 0 || row >= a.rows) && (!a.masked || id < 0)) return i;
  }
  const int64_t H = a.width;
  const size_t row_bytes = static_cast<size_t>(H) * dtype_size(a.dtype);
  const int nt = kernel_threads(a.n * H, int64_t{1} << 14);
  parallel_for_ranges(nt, a.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t row = a.ids[i] - a.first;
      float* dst = a.out + i * H;
      if (row < 0 || row >= a.rows) {
        std::fill(dst, dst + H, 0.0f);
      } else if (a.quant) {
        quant_weight_row(*a.quant, row, dst);
      } else {
        convert_dtype(static_cast<const char*>(a.table) + row * row_bytes, a.dtype, dst, DType::f32, H);
      }
    }
  });
  return -1;
}

}  // namespace fuselm::kernels
