// Complex numbers (c64: interleaved float pairs), as far as rotary embeddings written with them
// need: polar, view_as_complex / view_as_real (views: no copy) and the complex product.
// DeepseekV2's rope (`apply_rotary_emb`) is `view_as_real(view_as_complex(x) · freqs_cis)` with
// `freqs_cis = polar(1, angle) · attention_scaling`. The arithmetic is kernels/cpu/complex.h.
//
// aten.mul.Tensor is the elementwise family's (elementwise_ops.cc); this file wraps it so that a
// complex operand comes here and every other call goes on unchanged.
#include "kernels/cpu/complex.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// aten.polar(abs, angle) -> c64: abs·(cos angle + i sin angle).
void polar(OpCall& c) {
  const Tensor& a = c.tensor(0);
  const Tensor& t = c.tensor(1);
  std::array<int64_t, kMaxDims> shape{};
  const int nd = broadcast_shape(a, t, shape);
  Tensor out = c.alloc(DType::c64, std::span<const int64_t>(shape.data(), nd));
  kernels::polar(view(a), view(t), view(out));
  set_out(c, out);
}

// view_as_complex(x f32 [..., 2]) -> c64 [...]: the same memory when the pair is contiguous.
void view_as_complex(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dtype != DType::f32 || x.ndim < 1 || x.shape[x.ndim - 1] != 2)
    c.fail("view_as_complex needs an f32 tensor whose last dim is 2, got " + x.describe());
  bool direct = x.strides[x.ndim - 1] == 1 && (reinterpret_cast<uintptr_t>(x.data) % 8) == 0;
  for (int d = 0; d < x.ndim - 1 && direct; ++d) direct = x.shape[d] == 1 || x.strides[d] % 2 == 0;
  if (!direct) {
    Tensor copy = c.alloc(DType::f32, x.sizes());
    copy_into(x, copy);
    x = copy;
  }
  Tensor out = x;
  out.dtype = DType::c64;
  out.ndim = x.ndim - 1;
  for (int d = 0; d < out.ndim; ++d) out.strides[d] = x.shape[d] == 1 ? 1 : x.strides[d] / 2;
  set_out(c, out);
}

// view_as_real(z c64 [...]) -> f32 [..., 2]: the same memory.
void view_as_real(OpCall& c) {
  const Tensor& z = c.tensor(0);
  if (z.dtype != DType::c64) c.fail("view_as_real needs a c64 tensor, got " + z.describe());
  if (z.ndim + 1 > kMaxDims) c.fail("view_as_real: too many dims");
  Tensor out = z;
  out.dtype = DType::f32;
  out.ndim = z.ndim + 1;
  for (int d = 0; d < z.ndim; ++d) out.strides[d] = z.strides[d] * 2;
  out.shape[z.ndim] = 2;
  out.strides[z.ndim] = 1;
  set_out(c, out);
}

// (a_re + i a_im)(b_re + i b_im) with broadcasting; a real operand (tensor or scalar) has no
// imaginary part.
void complex_mul(OpCall& c) {
  double sa_store = 0, sb_store = 0;
  const Tensor a = c.arg(0).is_tensor() ? c.tensor(0) : scalar_tensor(c.arg(0), sa_store);
  const Tensor b = c.arg(1).is_tensor() ? c.tensor(1) : scalar_tensor(c.arg(1), sb_store);
  std::array<int64_t, kMaxDims> shape{};
  const int nd = broadcast_shape(a, b, shape);
  Tensor out = c.alloc(DType::c64, std::span<const int64_t>(shape.data(), nd));
  kernels::complex_mul(view(a), view(b), view(out));
  set_out(c, out);
}

}  // namespace

void register_complex_ops(OpRegistry& r) {
  r.add("aten.polar.default", polar);
  r.add("aten.view_as_complex.default", view_as_complex);
  r.add("aten.view_as_real.default", view_as_real);
  const OpFn* base = r.find("aten.mul.Tensor");
  if (!base) throw std::logic_error("register_complex_ops runs after the elementwise ops");
  r.add("aten.mul.Tensor", [real_mul = *base](OpCall& c) {
    const bool complex = (c.arg(0).is_tensor() && c.tensor(0).dtype == DType::c64) ||
                         (c.arg(1).is_tensor() && c.tensor(1).dtype == DType::c64);
    if (complex) complex_mul(c);
    else real_mul(c);
  });
}

}  // namespace fuselm::runtime::ops
