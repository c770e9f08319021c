#pragma once
// Helpers shared by the op families: dtype conversion, contiguous copies, broadcasting.
#include <array>
#include <cstdint>

#include "kernels/cpu/dtype.h"
#include "runtime/op_registry.h"
#include "runtime/tensor.h"

namespace fuselm::runtime::ops {

/// Element i (row-major over the tensor's shape, honouring strides) read as double.
double load_double(const Tensor& t, int64_t offset_elems);
void store_double(const Tensor& t, int64_t offset_elems, double v);

/// A temporary pool buffer returned to the pool when the guard dies (copies for contiguity,
/// dtype conversions). Never part of a node's value.
class Scratch {
 public:
  explicit Scratch(OpContext& ctx) : ctx_(ctx) {}
  Scratch(const Scratch&) = delete;
  ~Scratch() {
    if (owned_) ctx_.release(owned_);
  }
  Tensor alloc(DType dtype, std::span<const int64_t> shape) {
    Tensor t = ctx_.alloc(dtype, shape);
    owned_ = t.buffer;
    t.buffer = nullptr;
    return t;
  }

 private:
  OpContext& ctx_;
  Buffer* owned_ = nullptr;
};

/// t itself when contiguous and of dtype `dtype`, else a converted contiguous copy in `scratch`.
Tensor contiguous_as(const Tensor& t, DType dtype, Scratch& scratch);
/// Copies src into dst (same shape; any dtypes, any strides).
void copy_into(const Tensor& src, const Tensor& dst);

/// Calls f(offset_a, offset_b, offset_out) over every element of the broadcast of a and b into
/// out (contiguous). Shapes are right-aligned as in numpy/PyTorch.
void broadcast_strides(const Tensor& t, const Tensor& out, std::array<int64_t, kMaxDims>& strides);

/// PyTorch's broadcast of two shapes; throws std::runtime_error when they do not broadcast.
int broadcast_shape(const Tensor& a, const Tensor& b, std::array<int64_t, kMaxDims>& shape);

/// A 0-d tensor view of a scalar value, stored in `storage`.
Tensor scalar_tensor(const Value& v, double& storage);

/// The kernels' storage dtype of weight w (f32, bf16, f16; kernels/cpu/dtype.h); fails naming
/// `what` and the dtype otherwise.
kernels::DType weight_storage(OpCall& c, const Tensor& w, const char* what);

/// Wraps a tensor as the op's output.
inline void set_out(OpCall& c, const Tensor& t) { c.out.set_tensor(t); }

}  // namespace fuselm::runtime::ops
