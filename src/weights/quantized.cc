#include "weights/quantized.h"

#include <cstring>

#include "weights/convert.h"

namespace fuselm::weights {

std::optional<kernels::QuantType> policy_quant_type(DTypePolicy p) {
  if (p == DTypePolicy::q8_0) return kernels::QuantType::q8_0;
  if (p == DTypePolicy::q4_0) return kernels::QuantType::q4_0;
  return std::nullopt;
}

bool quantizable_shape(kernels::QuantType t, std::span<const int64_t> shape) {
  return shape.size() == 2 && shape[0] > 0 && shape[1] > 0 && shape[1] % kernels::quant_info(t).block_elems == 0;
}

WeightView quantize_tensor(const void* src, kernels::DType from, const std::vector<int64_t>& shape,
                           kernels::QuantType t, std::vector<AlignedBuffer>& buffers) {
  const int64_t n = shape[0], k = shape[1];
  const int64_t row_bytes = kernels::quant_row_bytes(t, k);
  AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(n * row_bytes));
  const size_t es = static_cast<size_t>(kernels::dtype_size(from));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    convert_elements(static_cast<const char*>(src) + static_cast<size_t>(r * k) * es, from, row.data(),
                     kernels::DType::f32, k);
    kernels::quantize_row(t, row.data(), static_cast<char*>(b.data()) + r * row_bytes, k);
  }
  WeightView v;
  v.shape = shape;
  v.data = b.data();
  v.owned = true;
  v.quant = t;
  return v;
}

WeightView dequantize_tensor(const void* src, kernels::QuantType t, const std::vector<int64_t>& shape,
                             kernels::DType to, std::vector<AlignedBuffer>& buffers) {
  const int64_t k = shape.back();
  int64_t n = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) n *= shape[d];
  const int64_t row_bytes = kernels::quant_row_bytes(t, k);
  AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(n * k * kernels::dtype_size(to)));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    kernels::dequantize_row(t, static_cast<const char*>(src) + r * row_bytes, row.data(), k);
    convert_elements(row.data(), kernels::DType::f32,
                     static_cast<char*>(b.data()) + static_cast<size_t>(r * k * kernels::dtype_size(to)), to, k);
  }
  WeightView v;
  v.shape = shape;
  v.dtype = to;
  v.data = b.data();
  v.owned = true;
  return v;
}

const void* permute_rows(const void* src, int64_t row_bytes, std::span<const int64_t> src_rows,
                         std::vector<AlignedBuffer>& buffers) {
  AlignedBuffer& b = buffers.emplace_back(static_cast<size_t>(row_bytes) * src_rows.size());
  for (size_t r = 0; r < src_rows.size(); ++r)
    std::memcpy(static_cast<char*>(b.data()) + r * static_cast<size_t>(row_bytes),
                static_cast<const char*>(src) + src_rows[r] * row_bytes, static_cast<size_t>(row_bytes));
  return b.data();
}

}  // namespace fuselm::weights
