#include "runtime/op_registry.h"

#include "ir/op_defs.h"

namespace fuselm::runtime {

const Tensor& OpCall::tensor(size_t i) const {
  if (i >= args.size() || !args[i].is_tensor()) fail(fmt::format("argument {} is not a tensor", i));
  return args[i].t;
}

int OpCall::ints(size_t i, std::array<int64_t, kMaxDims>& out) const {
  const Value& v = arg(i);
  if (v.kind == Value::Kind::integer) {
    out[0] = v.i;
    return 1;
  }
  if (v.kind != Value::Kind::list) fail(fmt::format("argument {} is not an int list", i));
  if (v.list.size() > kMaxDims) fail("int list longer than 8");
  for (size_t k = 0; k < v.list.size(); ++k) out[k] = v.list[k].as_int();
  return static_cast<int>(v.list.size());
}

size_t OpCall::index(std::string_view name) const {
  const ir::OpDef* def = ir::find_op_def(node.op);
  if (def)
    for (size_t i = 0; i < def->args.size(); ++i)
      if (def->args[i] == name) return i;
  fail(fmt::format("no argument named '{}' in this op's definition", name));
}

void OpCall::fail(const std::string& msg) const { ctx.fail(node, msg); }

const OpRegistry& OpRegistry::builtin() {
  static const OpRegistry r = [] {
    OpRegistry reg;
    ops::register_view_ops(reg);
    ops::register_elementwise_ops(reg);
    ops::register_reduction_ops(reg);
    ops::register_matmul_ops(reg);
    ops::register_misc_ops(reg);
    ops::register_scalar_ops(reg);
    ops::register_attention_ops(reg);
    ops::register_fused_ops(reg);
    ops::register_mutation_ops(reg);
    ops::register_mla_ops(reg);
    ops::register_complex_ops(reg);  // after the elementwise ops: wraps aten.mul.Tensor
    ops::register_router_ops(reg);
    ops::register_experts_ops(reg);
    ops::register_moe_route_ops(reg);
    ops::register_dist_ops(reg);
    ops::register_select_rows_ops(reg);
    ops::register_core_aten_ops(reg);
    ops::register_recurrent_ops(reg);
    return reg;
  }();
  return r;
}

}  // namespace fuselm::runtime
