#pragma once
// Helpers shared by the op families: dtype conversion, contiguous copies, broadcasting.
#include <array>
#include <cstdint>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/strided.h"
#include "runtime/op_registry.h"
#include "runtime/tensor.h"

namespace fuselm::runtime::ops {

static_assert(kMaxDims == kernels::kMaxStridedDims);

/// t's memory as the strided view the generic kernels take (kernels/cpu/strided.h).
inline kernels::Strided view(const Tensor& t) {
  kernels::Strided v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.ndim = t.ndim;
  v.shape = t.shape;
  v.strides = t.strides;
  return v;
}

/// Element at `offset_elems` (strides applied by the caller) read as double / stored from double.
inline double load_double(const Tensor& t, int64_t offset_elems) {
  return kernels::load_double(t.data, t.dtype, offset_elems);
}
inline void store_double(const Tensor& t, int64_t offset_elems, double v) {
  kernels::store_double(t.data, t.dtype, offset_elems, v);
}

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
/// Copies src into dst (same shape; any dtypes, any strides): kernels::copy_strided.
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
