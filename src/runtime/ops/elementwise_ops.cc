// Elementwise ops with PyTorch broadcasting: the shapes are checked and the output allocated
// here, the arithmetic is kernels/cpu/elementwise.h (fp32 in fp32, other dtypes through doubles).
#include <cstring>
#include <utility>

#include "kernels/cpu/elementwise.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Value of argument i as a tensor (a scalar becomes a 0-d f64 tensor over `storage`).
Tensor operand(OpCall& c, size_t i, double& storage) {
  const Value& v = c.args[i];
  return v.is_tensor() ? v.t : scalar_tensor(v, storage);
}

// out = fn(a, b) over the broadcast of arguments 0 and 1 (alpha: add's / rsub's argument 2).
void binary(OpCall& c, kernels::BinaryFn fn, double alpha = 1.0) {
  double sa, sb;
  Tensor a = operand(c, 0, sa), b = operand(c, 1, sb);
  std::array<int64_t, kMaxDims> shape{};
  int nd = broadcast_shape(a, b, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  kernels::binary(fn, alpha, view(a), view(b), view(out));
  set_out(c, out);
}

// add/sub with alpha: a + alpha * b.
void add_like(OpCall& c, double sign) { binary(c, kernels::BinaryFn::add, (c.has(2) ? c.real(2) : 1.0) * sign); }

void unary(OpCall& c, kernels::UnaryFn fn) {
  const Tensor& x = c.tensor(0);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  kernels::unary(fn, view(x), view(out));
  set_out(c, out);
}

void where(OpCall& c) {
  // where.self(condition, self, other): out = cond ? a : b, all broadcast together.
  const Tensor& cond = c.tensor(0);
  double sa, sb;
  Tensor a = operand(c, 1, sa), b = operand(c, 2, sb);
  std::array<int64_t, kMaxDims> s1{}, shape{};
  int nd1 = broadcast_shape(a, b, s1);
  Tensor ab = Tensor::contiguous_view(nullptr, DType::f32, std::span<const int64_t>(s1.data(), nd1));
  int nd = broadcast_shape(cond, ab, shape);
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), nd));
  kernels::where(view(cond), view(a), view(b), view(out));
  set_out(c, out);
}

void masked_fill(OpCall& c) {  // masked_fill.Scalar(self, mask, value)
  const Tensor& x = c.tensor(0);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  copy_into(x, out);
  kernels::masked_fill(view(c.tensor(1)), c.real(2), view(out));
  set_out(c, out);
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  using B = kernels::BinaryFn;
  using U = kernels::UnaryFn;
  for (const char* op : {"aten.add.Tensor", "aten.add.Scalar"}) r.add(op, [](OpCall& c) { add_like(c, 1.0); });
  for (const char* op : {"aten.sub.Tensor", "aten.sub.Scalar"}) r.add(op, [](OpCall& c) { add_like(c, -1.0); });
  r.add("aten.rsub.Scalar", [](OpCall& c) { binary(c, B::rsub, c.has(2) ? c.real(2) : 1.0); });  // other - alpha * self
  for (const char* op : {"aten.mul.Tensor", "aten.mul.Scalar"}) r.add(op, [](OpCall& c) { binary(c, B::mul); });
  for (const char* op : {"aten.div.Tensor", "aten.div.Scalar"}) r.add(op, [](OpCall& c) { binary(c, B::div); });
  r.add("aten.div.Tensor_mode", [](OpCall& c) {
    std::string mode = c.args[2].kind == Value::Kind::string ? c.args[2].s : "";
    binary(c, mode == "floor" ? B::div_floor : mode == "trunc" ? B::div_trunc : B::div);
  });
  for (const char* op : {"aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"})
    r.add(op, [](OpCall& c) { binary(c, !c.args[1].is_tensor() && c.real(1) == 2.0 ? B::square : B::pow); });
  // NaN propagates from either side, as in PyTorch.
  r.add("aten.maximum.default", [](OpCall& c) { binary(c, B::maximum); });
  r.add("aten.minimum.default", [](OpCall& c) { binary(c, B::minimum); });
  for (const char* s : {"Tensor", "Scalar"}) {
    std::string t(s);
    r.add("aten.eq." + t, [](OpCall& c) { binary(c, B::eq); });
    r.add("aten.ne." + t, [](OpCall& c) { binary(c, B::ne); });
    r.add("aten.lt." + t, [](OpCall& c) { binary(c, B::lt); });
    r.add("aten.le." + t, [](OpCall& c) { binary(c, B::le); });
    r.add("aten.gt." + t, [](OpCall& c) { binary(c, B::gt); });
    r.add("aten.ge." + t, [](OpCall& c) { binary(c, B::ge); });
  }
  // Bitwise on the integer values; for bools (0/1) this is logical and/or.
  r.add("aten.bitwise_and.Tensor", [](OpCall& c) { binary(c, B::bitwise_and); });
  r.add("aten.bitwise_or.Tensor", [](OpCall& c) { binary(c, B::bitwise_or); });
  r.add("aten.logical_and.default", [](OpCall& c) { binary(c, B::logical_and); });
  r.add("aten.where.self", where);
  r.add("aten.masked_fill.Scalar", masked_fill);

  const std::pair<const char*, U> unaries[] = {
      {"aten.neg.default", U::neg},   {"aten.abs.default", U::abs},         {"aten.rsqrt.default", U::rsqrt},
      {"aten.sqrt.default", U::sqrt}, {"aten.reciprocal.default", U::reciprocal}, {"aten.exp.default", U::exp},
      {"aten.log.default", U::log},   {"aten.sin.default", U::sin},         {"aten.cos.default", U::cos},
      {"aten.erf.default", U::erf},   {"aten.floor.default", U::floor},     {"aten.logical_not.default", U::logical_not},
      {"aten.tanh.default", U::tanh}, {"aten.sigmoid.default", U::sigmoid}, {"aten.silu.default", U::silu},
      {"aten.relu.default", U::relu}, {"aten.erfinv.default", U::erfinv},
  };
  for (const auto& [op, fn] : unaries) r.add(op, [fn](OpCall& c) { unary(c, fn); });
  r.add("aten.bitwise_not.default", [](OpCall& c) {  // logical for bools, ~x for integers
    unary(c, c.tensor(0).dtype == DType::boolean ? U::bool_not : U::bitwise_not);
  });
  r.add("aten.gelu.default", [](OpCall& c) {
    bool tanh = c.args.size() > 1 && c.args[1].kind == Value::Kind::string && std::strcmp(c.args[1].s, "tanh") == 0;
    unary(c, tanh ? U::gelu_tanh : U::gelu);
  });
}

}  // namespace fuselm::runtime::ops
