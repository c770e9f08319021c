#include "runtime/executor.h"

#include <algorithm>

#include <fmt/core.h>

#include <climits>
#include <stdexcept>

#include "ir/invariant_nodes.h"

namespace fuselm::runtime {
namespace {

void for_each_ref(const ir::Arg& a, const std::function<void(int)>& f) {
  if (a.kind == ir::Arg::Kind::ref) f(a.ref);
  for (const auto& x : a.list) for_each_ref(x, f);
}

}  // namespace

Executor::Executor(const ir::Graph& graph, const std::map<std::string, Tensor>& params,
                   const std::map<std::string, Tensor>& constants, dist::Communicator* comm)
    : graph_(graph) {
  ctx_.set_comm(comm);
  const auto& reg = OpRegistry::builtin();
  const size_t n = graph.nodes.size();
  fns_.assign(n, nullptr);
  values_.resize(n);
  args_.resize(n);
  last_use_.assign(n, -1);
  frees_at_.resize(n);
  for (const auto& node : graph.nodes) {
    if (node.op == "placeholder") {
      if (node.placeholder_kind == "input") {
        input_nodes_.push_back(node.index);
        continue;
      }
      const auto& table = node.placeholder_kind == "parameter" ? params : constants;
      auto it = table.find(node.target);
      if (it == table.end())
        throw std::runtime_error(fmt::format("no tensor loaded for {} '{}'", node.placeholder_kind, node.target));
      values_[node.index].set_tensor(it->second);
      continue;
    }
    fns_[node.index] = reg.find(node.op);
    if (!fns_[node.index])
      throw std::runtime_error(fmt::format("op '{}' is not implemented by the engine (node '{}' in module {})",
                                           node.op, node.name, module_of(node)));
    args_[node.index].resize(node.args.size());
    for (const auto& a : node.args) for_each_ref(a, [&](int r) { last_use_[r] = node.index; });
  }
  pack_weights();
  for (int o : graph.outputs) last_use_[o] = INT_MAX;
  hold_invariants();
  schedule_frees();
  // Step-invariant values are made here, at load: their memory is in use before the KV pool is
  // sized, and an op that fails on the weights fails the load.
  for (const auto& node : graph.nodes)
    if (fns_[node.index] && invariant_[node.index]) run_node(node);
}

// The weight operand of linear (argument 1, [n, k]) and addmm (argument 2, [k, n]) where it is a
// dense 2-d bf16 or f32 parameter: packed once, shared by every node that reads the same tensor
// (f32 on every path: the GEMM no longer packs W per call; the GEMV still reads the checkpoint's
// copy, so f32 weights of linear/addmm are held twice).
void Executor::pack_weights() {
  for (const auto& node : graph_.nodes) {
    const bool linear = node.op == "aten.linear.default", addmm = node.op == "aten.addmm.default";
    if (!linear && !addmm) continue;
    const size_t at = linear ? 1 : 2;
    if (node.args.size() <= at || node.args[at].kind != ir::Arg::Kind::ref) continue;
    const auto& src = graph_.nodes[node.args[at].ref];
    if (src.op != "placeholder" || src.placeholder_kind != "parameter") continue;
    const Tensor& w = values_[src.index].t;
    const bool packable = w.dtype == DType::bf16 || w.dtype == DType::f32;
    if (!packable || w.quant || w.ndim != 2 || w.strides[1] != 1 || w.strides[0] != w.shape[1]) continue;
    if (ctx_.packed_weights(w.data)) continue;
    const auto layout = linear ? kernels::WeightLayout::nk : kernels::WeightLayout::kn;
    const int64_t n = linear ? w.shape[0] : w.shape[1], k = linear ? w.shape[1] : w.shape[0];
    if (auto p = kernels::PackedLinearWeights::pack(w.data, w.dtype, layout, 0, n, k))
      ctx_.add_packed_weights(w.data, std::move(p));
  }
}

void Executor::schedule_frees() {
  for (const auto& node : graph_.nodes) {
    if (node.op == "placeholder") continue;
    const int i = node.index;
    // A value nobody reads is dropped right after it is made.
    const int at = last_use_[i] < 0 ? i : last_use_[i];
    if (at != INT_MAX) frees_at_[at].push_back(i);
  }
}

// A step-invariant value read by a node that runs every step is held for good; invariant values
// only other invariant nodes read are freed once those are made.
void Executor::hold_invariants() {
  invariant_ = ir::invariant_nodes(graph_);
  for (const auto& node : graph_.nodes) {
    if (!fns_[node.index] || invariant_[node.index]) continue;
    for (const auto& a : node.args)
      for_each_ref(a, [&](int r) {
        if (invariant_[r] && graph_.nodes[r].op != "placeholder") last_use_[r] = INT_MAX;
      });
  }
}

std::string Executor::module_of(const ir::Node& node) const { return ctx_.module_of(node); }

void Executor::fail(const ir::Node& node, const std::string& msg) const { ctx_.fail(node, msg); }

Tensor Executor::alloc(DType dtype, std::span<const int64_t> shape) { return ctx_.alloc(dtype, shape); }

void Executor::retain(const Value& v) {
  if (v.kind == Value::Kind::tensor) {
    if (v.t.buffer) ++v.t.buffer->refs;
  } else if (v.kind == Value::Kind::list) {
    for (const auto& x : v.list) retain(x);
  }
}

void Executor::drop(Value& v) {
  if (v.kind == Value::Kind::tensor) {
    if (v.t.buffer && --v.t.buffer->refs == 0) pool_.release(v.t.buffer);
    v.t.buffer = nullptr;
  } else if (v.kind == Value::Kind::list) {
    for (auto& x : v.list) drop(x);
  }
}

void Executor::resolve(const ir::Arg& a, Value& v) {
  using K = ir::Arg::Kind;
  switch (a.kind) {
    case K::none: v.kind = Value::Kind::none; break;
    case K::boolean: v.set_bool(a.b); break;
    case K::integer: v.set_int(a.i); break;
    case K::real: v.set_real(a.f); break;
    case K::string:
    case K::device:
      v.kind = Value::Kind::string;
      v.s = a.s.c_str();
      break;
    case K::dtype: v.set_int(static_cast<int64_t>(a.dtype)); break;
    case K::sym: v.set_int(eval_sym(a.s, symbols_)); break;
    case K::ref: v = values_[a.ref]; break;
    case K::list:
      v.kind = Value::Kind::list;
      v.list.resize(a.list.size());
      for (size_t i = 0; i < a.list.size(); ++i) resolve(a.list[i], v.list[i]);
      break;
  }
}

std::vector<std::string> Executor::input_targets() const {
  std::vector<std::string> out;
  for (int idx : input_nodes_) out.push_back(graph_.nodes[idx].target);
  return out;
}

const Tensor& Executor::run(std::span<const Tensor> inputs, const Batch& batch) {
  if (inputs.size() != input_nodes_.size())
    throw std::runtime_error(fmt::format("the graph takes {} inputs, {} were given", input_nodes_.size(), inputs.size()));
  for (Value* v : held_outputs_) drop(*v);
  held_outputs_.clear();
  ctx_.set_batch(batch);
  for (size_t in = 0; in < input_nodes_.size(); ++in) {
    const int idx = input_nodes_[in];
    const auto& node = graph_.nodes[idx];
    const Tensor& t = inputs[in];
    if (t.ndim != static_cast<int>(node.out.shape.size()))
      throw std::runtime_error(fmt::format("graph input '{}' has {} dims, the graph expects {}", node.target,
                                           t.ndim, node.out.shape.size()));
    for (int d = 0; d < t.ndim; ++d) {
      const auto& dim = node.out.shape[d];
      if (dim.symbolic()) symbols_[dim.expr] = t.shape[d];
    }
    values_[idx].set_tensor(t);
  }
  for (const auto& node : graph_.nodes)
    if (fns_[node.index] && !invariant_[node.index]) run_node(node);
  for (int o : graph_.outputs)  // each once: an output listed twice is one value
    if (std::find(held_outputs_.begin(), held_outputs_.end(), &values_[o]) == held_outputs_.end())
      held_outputs_.push_back(&values_[o]);
  const Value& out = values_[graph_.outputs.front()];
  if (!out.is_tensor()) throw std::runtime_error("graph output is not a tensor");
  return out.t;
}

void Executor::run_node(const ir::Node& node) {
  const int i = node.index;
  auto& args = args_[i];
  for (size_t k = 0; k < node.args.size(); ++k) resolve(node.args[k], args[k]);
  OpCall call{ctx_, node, args, values_[i]};
  (*fns_[i])(call);
  retain(values_[i]);
  for (int dead : frees_at_[i]) drop(values_[dead]);
}

size_t Executor::invariant_count() const {
  size_t n = 0;
  for (const auto& node : graph_.nodes) n += fns_[node.index] && invariant_[node.index];
  return n;
}

const Tensor& Executor::output(size_t k) const {
  if (k >= graph_.outputs.size() || !values_[graph_.outputs[k]].is_tensor())
    throw std::out_of_range("graph output " + std::to_string(k) + " is not a tensor of the last run");
  return values_[graph_.outputs[k]].t;
}

}  // namespace fuselm::runtime
