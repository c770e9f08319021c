#include "runtime/ops/common.h"


#include <cstring>
#include <stdexcept>

#include "kernels/cpu/dtype.h"

namespace fuselm::runtime::ops {


double load_double(const Tensor& t, int64_t o) {
  switch (t.dtype) {
    case DType::f32: return t.ptr<float>()[o];
    case DType::f64: return t.ptr<double>()[o];
    case DType::bf16: return kernels::bf16_to_f32(t.ptr<uint16_t>()[o]);
    case DType::f16: return kernels::f16_to_f32(t.ptr<uint16_t>()[o]);
    case DType::i64: return static_cast<double>(t.ptr<int64_t>()[o]);
    case DType::i32: return t.ptr<int32_t>()[o];
    case DType::i16: return t.ptr<int16_t>()[o];
    case DType::i8: return t.ptr<int8_t>()[o];
    case DType::u8: return t.ptr<uint8_t>()[o];
    case DType::boolean: return t.ptr<uint8_t>()[o] ? 1.0 : 0.0;
    default: throw std::runtime_error("dtype not supported in elementwise ops");
  }
}

void store_double(const Tensor& t, int64_t o, double v) {
  switch (t.dtype) {
    case DType::f32: t.ptr<float>()[o] = static_cast<float>(v); break;
    case DType::f64: t.ptr<double>()[o] = v; break;
    case DType::bf16: t.ptr<uint16_t>()[o] = kernels::f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: t.ptr<uint16_t>()[o] = kernels::f32_to_f16(static_cast<float>(v)); break;
    case DType::i64: t.ptr<int64_t>()[o] = static_cast<int64_t>(v); break;
    case DType::i32: t.ptr<int32_t>()[o] = static_cast<int32_t>(v); break;
    case DType::i16: t.ptr<int16_t>()[o] = static_cast<int16_t>(v); break;
    case DType::i8: t.ptr<int8_t>()[o] = static_cast<int8_t>(v); break;
    case DType::u8: t.ptr<uint8_t>()[o] = static_cast<uint8_t>(v); break;
    case DType::boolean: t.ptr<uint8_t>()[o] = v != 0.0; break;
    default: throw std::runtime_error("dtype not supported in elementwise ops");
  }
}

void copy_into(const Tensor& src, const Tensor& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.data, src.data, n * ir::dtype_size(src.dtype));
    return;
  }
  std::array<int64_t, kMaxDims> idx{};
  const int nd = dst.ndim;
  const int64_t inner = nd ? dst.shape[nd - 1] : 1;
  const int64_t s_in = nd ? src.strides[nd - 1] : 0, d_in = nd ? dst.strides[nd - 1] : 0;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < nd - 1; ++d) {
      so += idx[d] * src.strides[d];
      dof += idx[d] * dst.strides[d];
    }
    if (src.dtype == DType::f32 && dst.dtype == DType::f32) {
      const float* s = src.ptr<float>() + so;
      float* o = dst.ptr<float>() + dof;
      for (int64_t k = 0; k < inner; ++k) o[k * d_in] = s[k * s_in];
    } else {
      for (int64_t k = 0; k < inner; ++k) store_double(dst, dof + k * d_in, load_double(src, so + k * s_in));
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < dst.shape[d]) break;
      idx[d] = 0;
    }
  }
}

Tensor contiguous_as(const Tensor& t, DType dtype, Scratch& scratch) {
  if (t.dtype == dtype && t.is_contiguous()) return t;
  Tensor c = scratch.alloc(dtype, t.sizes());
  copy_into(t, c);
  return c;
}

int broadcast_shape(const Tensor& a, const Tensor& b, std::array<int64_t, kMaxDims>& shape) {
  const int nd = std::max(a.ndim, b.ndim);
  for (int i = 0; i < nd; ++i) {
    int ia = a.ndim - nd + i, ib = b.ndim - nd + i;
    int64_t sa = ia >= 0 ? a.shape[ia] : 1, sb = ib >= 0 ? b.shape[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw std::runtime_error("shapes " + a.describe() + " and " + b.describe() + " do not broadcast");
    shape[i] = sa == 1 ? sb : sa;
  }
  return nd;
}

void broadcast_strides(const Tensor& t, const Tensor& out, std::array<int64_t, kMaxDims>& strides) {
  for (int i = 0; i < out.ndim; ++i) {
    int it = t.ndim - out.ndim + i;
    strides[i] = (it < 0 || t.shape[it] == 1) ? 0 : t.strides[it];
  }
}

Tensor scalar_tensor(const Value& v, double& storage) {
  storage = v.as_double();
  Tensor t;
  t.dtype = DType::f64;
  t.ndim = 0;
  t.data = &storage;
  return t;
}

kernels::DType weight_storage(OpCall& c, const Tensor& w, const char* what) {
  if (auto d = kernels::storage_dtype(w.dtype)) return *d;
  c.fail(fmt::format("{} dtype {} is not supported", what, ir::dtype_name(w.dtype)));
}

}  // namespace fuselm::runtime::ops
