#pragma once
// A strided view of memory owned elsewhere: a pool buffer (activations), a mapped checkpoint
// (weights) or a constant. Strides are in elements; views (transpose, slice, expand) share memory.
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "ir/dtype.h"
#include "runtime/device.h"

namespace fuselm::kernels {
struct QuantWeight;  // kernels/cpu/quant_weight.h
}

namespace fuselm::runtime {

using ir::DType;
inline constexpr int kMaxDims = 8;

struct Buffer;  // buffer_pool.h

struct Tensor {
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};
  void* data = nullptr;
  Buffer* buffer = nullptr;  // null for memory the executor does not own (weights, inputs)
  Device device = Device::cpu;  // where data lives
  /// A block-quantized weight (linear and embedding read it; engine::Model lets no other op see
  /// one): `data` holds its blocks and dtype is u8; shape is the logical [n, k].
  const kernels::QuantWeight* quant = nullptr;

  int64_t numel() const;
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  bool is_contiguous() const;
  std::span<const int64_t> sizes() const { return {shape.data(), static_cast<size_t>(ndim)}; }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  /// "[1, 7, 576] f32" for error messages.
  std::string describe() const;

  /// A contiguous tensor header over data (no ownership).
  static Tensor contiguous_view(void* data, DType dtype, std::span<const int64_t> shape);
};

/// Normalizes a possibly negative dimension index; throws std::runtime_error when out of range.
int wrap_dim(int64_t dim, int ndim);

}  // namespace fuselm::runtime
