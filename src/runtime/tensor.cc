#include "runtime/tensor.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <vector>

namespace fuselm::runtime {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string Tensor::describe() const {
  return fmt::format("[{}] {}", fmt::join(sizes(), ", "), ir::dtype_name(dtype));
}

Tensor Tensor::contiguous_view(void* data, DType dtype, std::span<const int64_t> shape) {
  if (shape.size() > kMaxDims) throw std::runtime_error("tensor has more than 8 dimensions");
  Tensor t;
  t.dtype = dtype;
  t.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = s;
    s *= shape[i];
  }
  t.data = data;
  return t;
}

int wrap_dim(int64_t dim, int ndim) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= std::max(ndim, 1))
    throw std::runtime_error(fmt::format("dimension {} out of range for a {}-d tensor", dim, ndim));
  return static_cast<int>(d);
}

}  // namespace fuselm::runtime
