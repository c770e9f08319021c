// Ops the fusers put in the graph (src/fusers): one kernel where the captured graph had a chain.
//   fuselm.rms_norm(x, w | None, eps, weight_offset) -> x · rsqrt(mean(x², -1) + eps) · (w + offset)
//       fp32 arithmetic for any x and weight dtype; output in the node's dtype
//   fuselm.act_and_mul(gu [..., 2N], act) -> act(gu[..., :N]) · gu[..., N:]   act: silu|gelu|gelu_tanh
//   fuselm.rope(x [..., d], cos, sin, pairing) -> x · cos + rotate(x) · sin   pairing: half|interleaved
//       f32 only (the rope fuser fuses nothing else); cos and sin broadcast to x
//   fuselm.softcap(x, cap) -> cap · tanh(x / cap)   f32 only; bit for bit the unfused div, tanh, mul
#include <algorithm>
#include <cstring>
#include <string_view>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

Tensor finish_as(OpCall& c, const Tensor& y) {
  if (c.out_dtype() == DType::f32) return y;
  Tensor o = c.alloc(c.out_dtype(), y.sizes());
  copy_into(y, o);
  return o;
}

void rms_norm(OpCall& c) {
  const Tensor& x = c.tensor(0);
  if (x.ndim < 1) c.fail("rms_norm of a scalar");
  const int64_t width = x.shape[x.ndim - 1];
  const int64_t rows = width ? x.numel() / width : 0;
  Scratch sx(c.ctx), sw(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, sx);
  const float* w = nullptr;
  if (c.has(1)) {
    Tensor wc = contiguous_as(c.tensor(1), DType::f32, sw);
    if (wc.numel() != width) c.fail("weight " + wc.describe() + " does not match rows of width " + std::to_string(width));
    w = wc.ptr<float>();
  }
  Tensor y = c.alloc(DType::f32, x.sizes());
  kernels::rms_norm(xc.ptr<float>(), width, w, y.ptr<float>(), width, rows, width, static_cast<float>(c.real(2)),
                    static_cast<float>(c.real(3)));
  if (c.out_dtype() == DType::f32) {
    set_out(c, y);
    return;
  }
  Tensor o = finish_as(c, y);
  c.ctx.release(y.buffer);
  set_out(c, o);
}

kernels::Act parse_act(OpCall& c) {
  const Value& v = c.arg(1);
  if (v.kind != Value::Kind::string || !v.s) c.fail("activation is not a string");
  const std::string_view a = v.s;
  if (a == "silu") return kernels::Act::silu;
  if (a == "gelu") return kernels::Act::gelu;
  if (a == "gelu_tanh") return kernels::Act::gelu_tanh;
  c.fail("activation '" + std::string(a) + "' has no act-and-mul kernel");
}

void act_and_mul(OpCall& c) {
  const Tensor& gu = c.tensor(0);
  if (gu.ndim < 1 || gu.shape[gu.ndim - 1] % 2 != 0) c.fail("input " + gu.describe() + " is not [..., 2N]");
  const kernels::Act act = parse_act(c);
  const int64_t n2 = gu.shape[gu.ndim - 1], n = n2 / 2;
  const int64_t rows = n2 ? gu.numel() / n2 : 0;
  Scratch s(c.ctx);
  Tensor g = contiguous_as(gu, DType::f32, s);
  std::array<int64_t, kMaxDims> shape{};
  for (int d = 0; d < gu.ndim; ++d) shape[d] = gu.shape[d];
  shape[gu.ndim - 1] = n;
  Tensor y = c.alloc(DType::f32, std::span<const int64_t>(shape.data(), gu.ndim));
  kernels::act_and_mul(act, g.ptr<float>(), n2, g.ptr<float>() + n, n2, y.ptr<float>(), n, rows, n);
  set_out(c, y);
}

void rope(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const Tensor &cos = c.tensor(1), &sin = c.tensor(2);
  const Value& pv = c.arg(3);
  const std::string_view pairing = pv.kind == Value::Kind::string && pv.s ? pv.s : "";
  if (pairing != "half" && pairing != "interleaved") c.fail("rope pairing '" + std::string(pairing) + "' is not half or interleaved");
  for (const Tensor* t : {&x, &cos, &sin})
    if (t->dtype != DType::f32) c.fail("rope of " + t->describe() + ": the fused rope runs f32 only");
  if (x.ndim < 1 || x.shape[x.ndim - 1] % 2 != 0) c.fail("rope of " + x.describe() + ": the last dim is not even");
  for (const Tensor* t : {&cos, &sin}) {
    std::array<int64_t, kMaxDims> shape{};
    const int nd = broadcast_shape(x, *t, shape);
    if (nd != x.ndim || !std::equal(x.shape.begin(), x.shape.begin() + nd, shape.begin()))
      c.fail(t->describe() + " does not broadcast to the rotated " + x.describe());
  }
  Tensor y = c.alloc(DType::f32, x.sizes());
  kernels::rope(pairing == "half" ? kernels::RopePairing::half : kernels::RopePairing::interleaved, view(x), view(cos), view(sin), view(y));
  set_out(c, y);
}

// A contiguous f32 run [b, e) of p as a 1-d view.
kernels::Strided run_of(float* p, int64_t b, int64_t e) {
  kernels::Strided v;
  v.data = p + b;
  v.ndim = 1;
  v.shape[0] = e - b;
  v.strides[0] = 1;
  return v;
}

// Floats per block: the three kernels pass over one block while it sits in L1.
constexpr int64_t kSoftcapBlock = 4096;

// cap · tanh(x / cap) by the kernels the unfused aten.div, aten.tanh and aten.mul run
// (kernels::binary with the cap as a 0-d f64 scalar read once as f32, then unary_tanh_f32, then
// kernels::binary), each element through the same operations in the same order, so the result is
// bit-identical to the unfused chain's. They go block by block over the output, so the tensor is
// read and written once instead of three times. A strided x is divided whole into y first (the
// div kernel walks its strides), then tanh and the product run in place by blocks.
void softcap(OpCall& c) {
  const Tensor& x = c.tensor(0);
  if (x.dtype != DType::f32 || c.out_dtype() != DType::f32) c.fail("softcap of " + x.describe() + ": the fused softcap runs f32 only");
  double storage = 0;
  const kernels::Strided cap = view(scalar_tensor(c.arg(1), storage));
  Tensor y = c.alloc(DType::f32, x.sizes());
  const bool whole_div = !x.is_contiguous();
  if (whole_div) kernels::binary(kernels::BinaryFn::div, 1.0, view(x), cap, view(y));
  float* const in = whole_div ? y.ptr<float>() : x.ptr<float>();
  float* const out = y.ptr<float>();
  const int64_t n = y.numel();
  kernels::parallel_for_ranges(kernels::strided_threads(n), n, kSoftcapBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += kSoftcapBlock) {
      const int64_t e = std::min(end, b + kSoftcapBlock);
      if (!whole_div) kernels::binary(kernels::BinaryFn::div, 1.0, run_of(in, b, e), cap, run_of(out, b, e));
      kernels::unary_tanh_f32(out + b, out + b, e - b);
      kernels::binary(kernels::BinaryFn::mul, 1.0, run_of(out, b, e), cap, run_of(out, b, e));
    }
  });
  set_out(c, y);
}

}  // namespace

void register_fused_ops(OpRegistry& r) {
  r.add("fuselm.rms_norm.default", rms_norm);
  r.add("fuselm.act_and_mul.default", act_and_mul);
  r.add("fuselm.rope.default", rope);
  r.add("fuselm.softcap.default", softcap);
}

}  // namespace fuselm::runtime::ops
