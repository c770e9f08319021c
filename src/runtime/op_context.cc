#include "runtime/op_context.h"

#include <fmt/core.h>

#include <stdexcept>

namespace fuselm::runtime {

Tensor OpContext::alloc(DType dtype, std::span<const int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  Buffer* b = pool_.acquire(static_cast<size_t>(n * ir::dtype_size(dtype)));
  Tensor t = Tensor::contiguous_view(b->data, dtype, shape);
  t.buffer = b;
  t.device = pool_.device();
  return t;
}

std::string OpContext::module_of(const ir::Node& node) const {
  if (node.module_stack.empty()) return "<root>";
  const auto& path = graph_.modules[node.module_stack.back()].path;
  return path.empty() ? "<root>" : path;
}

dist::Communicator& OpContext::comm(const ir::Node& node) const {
  if (!comm_) fail(node, "a collective outside tensor parallelism (the model was loaded without a communicator)");
  return *comm_;
}

void OpContext::fail(const ir::Node& node, const std::string& msg) const {
  throw std::runtime_error(fmt::format("op {} in module {} (node '{}'): {}", node.op, module_of(node), node.name, msg));
}

}  // namespace fuselm::runtime
