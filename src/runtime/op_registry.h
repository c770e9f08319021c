#pragma once
// Kernels for graph ops, looked up by the IR's op name ("aten.linear.default"). Each ops/*.cc
// file registers its family in register_<family>_ops; register_all_ops lists them.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "runtime/op_context.h"
#include "runtime/value.h"

namespace fuselm::runtime {

/// One call of an op: its context (allocator, batch, device, errors), resolved arguments in
/// schema order, the output to fill.
struct OpCall {
  OpContext& ctx;
  const ir::Node& node;
  std::span<Value> args;
  Value& out;

  /// A contiguous pool-owned tensor; its memory lives while the executor holds the value.
  Tensor alloc(DType dtype, std::span<const int64_t> shape) { return ctx.alloc(dtype, shape); }
  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape) {
    return alloc(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  const Tensor& tensor(size_t i) const;
  /// Argument i; fails naming the op when the node has fewer arguments.
  const Value& arg(size_t i) const {
    if (i >= args.size()) fail(fmt::format("missing argument {}", i));
    return args[i];
  }
  bool has(size_t i) const { return i < args.size() && !args[i].is_none(); }
  double real(size_t i) const { return arg(i).as_double(); }
  int64_t integer(size_t i) const { return arg(i).as_int(); }
  bool boolean(size_t i) const { return arg(i).as_int() != 0; }
  /// An int list argument (sizes, dims); at most kMaxDims entries.
  int ints(size_t i, std::array<int64_t, kMaxDims>& out) const;
  /// Index of argument `name` in the op's definition (ir/op_defs.h: fuselm ops are read by name);
  /// fails naming the op when it defines no such argument.
  size_t index(std::string_view name) const;
  const Value& arg(std::string_view name) const { return arg(index(name)); }
  const Tensor& tensor(std::string_view name) const { return tensor(index(name)); }
  bool has(std::string_view name) const { return has(index(name)); }
  double real(std::string_view name) const { return real(index(name)); }
  int64_t integer(std::string_view name) const { return integer(index(name)); }
  bool boolean(std::string_view name) const { return boolean(index(name)); }
  /// The node's output dtype as captured.
  DType out_dtype() const { return node.out.dtype; }
  /// Throws std::runtime_error "op X in module M (node N): msg".
  [[noreturn]] void fail(const std::string& msg) const;
};

using OpFn = std::function<void(OpCall&)>;

class OpRegistry {
 public:
  void add(const std::string& op, OpFn fn) { ops_[op] = std::move(fn); }
  const OpFn* find(const std::string& op) const {
    auto it = ops_.find(op);
    return it == ops_.end() ? nullptr : &it->second;
  }
  /// Every registered op name, sorted (the op tests check that each one has a test case).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, fn] : ops_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// The registry with every op family of the engine.
  static const OpRegistry& builtin();

 private:
  std::unordered_map<std::string, OpFn> ops_;
};

namespace ops {
void register_view_ops(OpRegistry& r);
void register_elementwise_ops(OpRegistry& r);
void register_reduction_ops(OpRegistry& r);
void register_matmul_ops(OpRegistry& r);
void register_misc_ops(OpRegistry& r);
void register_scalar_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
void register_fused_ops(OpRegistry& r);  // ops the fusers insert (fused_ops.cc)
void register_mutation_ops(OpRegistry& r);  // copy_ into views, new_empty (mutation_ops.cc)
void register_mla_ops(OpRegistry& r);  // latent attention the mla fuser inserts (mla_op.cc)
void register_complex_ops(OpRegistry& r);  // c64 for complex rope; wraps mul (complex_ops.cc)
void register_router_ops(OpRegistry& r);   // top-k, gather/scatter, in-place arithmetic (router_ops.cc)
void register_experts_ops(OpRegistry& r);  // fuselm.experts (experts_op.cc)
void register_moe_route_ops(OpRegistry& r);  // fuselm.moe_route, inserted by the moe fuser
void register_dist_ops(OpRegistry& r);       // fuselm.all_reduce, inserted by the TP sharding plan
void register_select_rows_ops(OpRegistry& r);  // fuselm.select_rows, inserted by the engine (select_rows_op.cc)
void register_core_aten_ops(OpRegistry& r);  // clamp, square, softplus, stack, ... (core_aten_ops.cc)
void register_recurrent_ops(OpRegistry& r);  // the stateful ops of hybrid models (recurrent_ops.cc)
}  // namespace ops

}  // namespace fuselm::runtime
