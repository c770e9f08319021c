// Shape arithmetic on Python scalars (sym_size, operator.*) and getitem on op results.
#include <cmath>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

template <typename F>
void scalar_binary(OpCall& c, F f) {
  const Value& a = c.arg(0);
  const Value& b = c.arg(1);
  if (a.kind == Value::Kind::real || b.kind == Value::Kind::real) {
    c.out.set_real(f(a.as_double(), b.as_double()));
  } else {
    c.out.set_int(static_cast<int64_t>(f(static_cast<double>(a.as_int()), static_cast<double>(b.as_int()))));
  }
}

}  // namespace

void register_scalar_ops(OpRegistry& r) {
  r.add("aten.sym_size.int", [](OpCall& c) {
    const Tensor& t = c.tensor(0);
    c.out.set_int(t.shape[wrap_dim(c.integer(1), t.ndim)]);
  });
  r.add("aten.sym_numel.default", [](OpCall& c) { c.out.set_int(c.tensor(0).numel()); });
  r.add("getitem", [](OpCall& c) {
    const Value& v = c.arg(0);
    if (v.kind != Value::Kind::list) c.fail("getitem on a value that is not a list");
    int64_t i = c.integer(1);
    if (i < 0) i += static_cast<int64_t>(v.list.size());
    if (i < 0 || i >= static_cast<int64_t>(v.list.size())) c.fail("getitem index out of range");
    c.out = v.list[i];
  });
  r.add("operator.add", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return a + b; }); });
  r.add("operator.sub", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return a - b; }); });
  r.add("operator.mul", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return a * b; }); });
  r.add("operator.floordiv", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return std::floor(a / b); }); });
  r.add("operator.mod", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return a - std::floor(a / b) * b; }); });
  r.add("operator.truediv", [](OpCall& c) { c.out.set_real(c.real(0) / c.real(1)); });
  r.add("operator.neg", [](OpCall& c) {
    if (c.args[0].kind == Value::Kind::real) c.out.set_real(-c.args[0].f);
    else c.out.set_int(-c.integer(0));
  });
  r.add("torch.sym_float", [](OpCall& c) { c.out.set_real(c.real(0)); });
  r.add("torch.sym_int", [](OpCall& c) { c.out.set_int(static_cast<int64_t>(c.real(0))); });
  // Python's math functions on a symbolic float (torch.sym_int(x) exports as math.trunc).
  r.add("math.trunc", [](OpCall& c) { c.out.set_int(static_cast<int64_t>(std::trunc(c.real(0)))); });
  r.add("math.floor", [](OpCall& c) { c.out.set_int(static_cast<int64_t>(std::floor(c.real(0)))); });
  r.add("math.ceil", [](OpCall& c) { c.out.set_int(static_cast<int64_t>(std::ceil(c.real(0)))); });
  r.add("torch.sym_max", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return std::max(a, b); }); });
  r.add("torch.sym_min", [](OpCall& c) { scalar_binary(c, [](double a, double b) { return std::min(a, b); }); });
}

}  // namespace fuselm::runtime::ops
