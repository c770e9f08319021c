#include "kernels/cpu/norm.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/norm_impl.h"
#include "isa/norm_tables.inc"

namespace fuselm::kernels {

const NormKernels kNormKernelsGeneric = make_norm_kernels<Isa::generic>();

namespace {

const NormKernels& norm_kernels() {
  return isa_kernels<NormKernels>();
}

void check_rows(const char* op, const float* x, int64_t ldx, const float* y, int64_t ldy,
                int64_t width) {
  if (!x || !y) throw std::invalid_argument(fmt::format("{}: null pointer", op));
  if (ldx < width || ldy < width)
    throw std::invalid_argument(
        fmt::format("{}: strides ldx={} ldy={} below width {}", op, ldx, ldy, width));
}

template <class F>
void for_rows(int64_t rows, int64_t width, F&& row) {
  const int nt = kernel_threads(rows * width, int64_t{1} << 14);
  parallel_for_ranges(nt, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row(r);
  });
}

}  // namespace

void rms_norm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t rows,
              int64_t width, float eps, float w_offset) {
  if (rows <= 0 || width <= 0) return;
  check_rows("rms_norm", x, ldx, y, ldy, width);
  const NormKernels& kern = norm_kernels();
  for_rows(rows, width, [&](int64_t r) { kern.rms_norm(x + r * ldx, w, y + r * ldy, width, eps, w_offset); });
}

void layer_norm(const float* x, int64_t ldx, const float* w, const float* b, float* y, int64_t ldy,
                int64_t rows, int64_t width, float eps) {
  if (rows <= 0 || width <= 0) return;
  check_rows("layer_norm", x, ldx, y, ldy, width);
  const NormKernels& kern = norm_kernels();
  for_rows(rows, width, [&](int64_t r) { kern.layer_norm(x + r * ldx, w, b, y + r * ldy, width, eps); });
}

void softmax(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  check_rows("softmax", x, ldx, y, ldy, width);
  const NormKernels& kern = norm_kernels();
  for_rows(rows, width, [&](int64_t r) { kern.softmax(x + r * ldx, y + r * ldy, width); });
}

}  // namespace fuselm::kernels
