#include "runtime/ops/common.h"

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/copy.h"
#include "kernels/cpu/dtype.h"

namespace fuselm::runtime::ops {

void copy_into(const Tensor& src, const Tensor& dst) { kernels::copy_strided(view(src), view(dst)); }

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
  strides = kernels::broadcast_strides(view(t), view(out));
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
