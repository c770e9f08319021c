// Indexed walks along one dimension and in-place arithmetic (index.h).
#include "kernels/cpu/index.h"

#include <stdexcept>

namespace fuselm::kernels {
namespace {

std::string describe(const Strided& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

// The value of index element i (row-major) and x's offset for it; `at` is wrapped when negative.
int64_t index_value(const Strided& index, int64_t i) { return static_cast<int64_t>(load_double(index, offset_of(i, index, index.strides))); }

int64_t x_offset(const Strided& x, int dim, const Strided& index, int64_t i, int64_t at) {
  if (at < 0) at += x.shape[dim];
  int64_t off = 0;
  for (int k = index.ndim - 1; k >= 0; --k) {
    const int64_t pos = i % index.shape[k];
    i /= index.shape[k];
    off += (k == dim ? at : pos) * x.strides[k];
  }
  return off;
}

}  // namespace

std::string check_index_along(const Strided& x, int dim, const Strided& index) {
  if (index.ndim != x.ndim) return "index " + describe(index) + " and input " + describe(x) + " differ in rank";
  for (int k = 0; k < x.ndim; ++k)
    if (k != dim && index.shape[k] > x.shape[k]) return "index " + describe(index) + " is larger than input " + describe(x);
  const int64_t n = index.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = index_value(index, i);
    if (at < -x.shape[dim] || at >= x.shape[dim])
      return "index " + std::to_string(at) + " is out of bounds for dimension " + std::to_string(dim) + " of size " +
             std::to_string(x.shape[dim]);
  }
  return "";
}

void gather_along(const Strided& x, int dim, const Strided& index, const Strided& out) {
  const int64_t n = index.numel();
  for (int64_t i = 0; i < n; ++i) store_double(out, i, load_double(x, x_offset(x, dim, index, i, index_value(index, i))));
}

void scatter_along(const Strided& x, int dim, const Strided& index, double v) {
  const int64_t n = index.numel();
  for (int64_t i = 0; i < n; ++i) store_double(x, x_offset(x, dim, index, i, index_value(index, i)), v);
}

void binary_in_place(BinaryFn fn, double alpha, const Strided& x, const Strided& y) {
  if (fn != BinaryFn::add && fn != BinaryFn::mul && fn != BinaryFn::div)
    throw std::invalid_argument("binary_in_place: only add, mul and div");
  const auto ys = broadcast_strides(y, x);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t xo = offset_of(i, x, x.strides), yo = offset_of(i, x, ys);
    const double a = load_double(x, xo), b = load_double(y, yo);
    store_double(x, xo, fn == BinaryFn::add ? a + alpha * b : fn == BinaryFn::mul ? a * b : a / b);
  }
}

}  // namespace fuselm::kernels
