// Complex numbers (c64: interleaved float pairs), as far as rotary embeddings written with them
// need: polar, view_as_complex / view_as_real (views: no copy) and the complex product.
// DeepseekV2's rope (`apply_rotary_emb`) is `view_as_real(view_as_complex(x) · freqs_cis)` with
// `freqs_cis = polar(1, angle) · attention_scaling`.
//
// aten.mul.Tensor is the elementwise family's (elementwise_ops.cc); this file wraps it so that a
// complex operand comes here and every other call goes on unchanged.
#include <cmath>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Offset (in elements of t's dtype) of element i of a row-major walk over `shape`, with t's
// broadcast strides.
int64_t offset_of(int64_t i, int nd, const std::array<int64_t, kMaxDims>& shape,
                  const std::array<int64_t, kMaxDims>& strides) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// aten.polar(abs, angle) -> c64: abs·(cos angle + i sin angle).
void polar(OpCall& c) {
  const Tensor& a = c.tensor(0);
  const Tensor& t = c.tensor(1);
  std::array<int64_t, kMaxDims> shape{};
  const int nd = broadcast_shape(a, t, shape);
  Tensor out = c.alloc(DType::c64, std::span<const int64_t>(shape.data(), nd));
  std::array<int64_t, kMaxDims> sa{}, st{};
  broadcast_strides(a, out, sa);
  broadcast_strides(t, out, st);
  float* o = out.ptr<float>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double r = load_double(a, offset_of(i, nd, shape, sa)), th = load_double(t, offset_of(i, nd, shape, st));
    o[2 * i] = static_cast<float>(r * std::cos(th));
    o[2 * i + 1] = static_cast<float>(r * std::sin(th));
  }
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
  std::array<int64_t, kMaxDims> st_a{}, st_b{};
  broadcast_strides(a, out, st_a);
  broadcast_strides(b, out, st_b);
  auto load = [](const Tensor& t, int64_t off, double& re, double& im) {
    if (t.dtype == DType::c64) {
      re = t.ptr<float>()[2 * off];
      im = t.ptr<float>()[2 * off + 1];
    } else {
      re = load_double(t, off);
      im = 0;
    }
  };
  float* o = out.ptr<float>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    double ar, ai, br, bi;
    load(a, offset_of(i, nd, shape, st_a), ar, ai);
    load(b, offset_of(i, nd, shape, st_b), br, bi);
    o[2 * i] = static_cast<float>(ar * br - ai * bi);
    o[2 * i + 1] = static_cast<float>(ar * bi + ai * br);
  }
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
