// Ops that make or convert tensors: cat, dtype casts and copies, factories (ones, zeros, full,
// arange) and the *_like family. The copies and fills are kernels/cpu/copy.h.
#include <cmath>
#include <cstring>

#include "kernels/cpu/copy.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

void cat(OpCall& c) {
  const Value& list = c.args[0];
  if (list.kind != Value::Kind::list || list.list.empty()) c.fail("cat needs a list of tensors");
  const Tensor* first = nullptr;
  for (const auto& v : list.list)
    if (v.is_tensor() && v.t.numel() > 0) { first = &v.t; break; }
  if (!first) first = &list.list[0].t;
  int d = wrap_dim(c.has(1) ? c.integer(1) : 0, first->ndim);
  std::array<int64_t, kMaxDims> shape{};
  for (int k = 0; k < first->ndim; ++k) shape[k] = first->shape[k];
  shape[d] = 0;
  for (const auto& v : list.list) {
    if (v.t.ndim == 1 && v.t.shape[0] == 0) continue;  // legacy empty tensors are skipped
    shape[d] += v.t.shape[d];
  }
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(shape.data(), first->ndim));
  int64_t off = 0;
  for (const auto& v : list.list) {
    if (v.t.ndim == 1 && v.t.shape[0] == 0) continue;
    Tensor dst = out;
    dst.data = static_cast<char*>(out.data) + off * out.strides[d] * ir::dtype_size(out.dtype);
    dst.shape[d] = v.t.shape[d];
    copy_into(v.t, dst);
    off += v.t.shape[d];
  }
  set_out(c, out);
}

// to / _to_copy / type_as: PyTorch returns the input itself when nothing changes.
void convert(OpCall& c, bool always_copy) {
  const Tensor& x = c.tensor(0);
  DType od = c.out_dtype();
  if (od == x.dtype && !always_copy) {
    set_out(c, x);
    return;
  }
  Tensor out = c.alloc(od, x.sizes());
  copy_into(x, out);
  set_out(c, out);
}

void fill(OpCall& c, std::span<const int64_t> shape, double v) {
  Tensor out = c.alloc(c.out_dtype(), shape);
  kernels::fill(view(out), v);
  set_out(c, out);
}

void factory(OpCall& c, double v) {
  std::array<int64_t, kMaxDims> shape{};
  int nd = c.ints(0, shape);
  fill(c, std::span<const int64_t>(shape.data(), nd), v);
}

void arange(OpCall& c, double start, double end, double step) {
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  Tensor out = c.alloc(c.out_dtype(), {n});
  kernels::arange(view(out), start, step);
  set_out(c, out);
}

}  // namespace

void register_misc_ops(OpRegistry& r) {
  r.add("aten.cat.default", cat);
  r.add("aten.concat.default", cat);  // an alias of cat
  for (const char* op : {"aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
                         "aten.type_as.default", "aten._to_copy.default"})
    r.add(op, [](OpCall& c) { convert(c, false); });
  for (const char* op : {"aten.clone.default", "aten.contiguous.default"})
    r.add(op, [](OpCall& c) {
      const Tensor& x = c.tensor(0);
      if (x.is_contiguous() && std::string(c.node.op) == "aten.contiguous.default") {
        set_out(c, x);
        return;
      }
      convert(c, true);
    });
  r.add("aten.ones.default", [](OpCall& c) { factory(c, 1.0); });
  r.add("aten.zeros.default", [](OpCall& c) { factory(c, 0.0); });
  r.add("aten.full.default", [](OpCall& c) {
    std::array<int64_t, kMaxDims> shape{};
    int nd = c.ints(0, shape);
    fill(c, std::span<const int64_t>(shape.data(), nd), c.real(1));
  });
  r.add("aten.ones_like.default", [](OpCall& c) { fill(c, c.tensor(0).sizes(), 1.0); });
  r.add("aten.zeros_like.default", [](OpCall& c) { fill(c, c.tensor(0).sizes(), 0.0); });
  r.add("aten.full_like.default", [](OpCall& c) { fill(c, c.tensor(0).sizes(), c.real(1)); });
  r.add("aten.new_ones.default", [](OpCall& c) {
    std::array<int64_t, kMaxDims> shape{};
    int nd = c.ints(1, shape);
    fill(c, std::span<const int64_t>(shape.data(), nd), 1.0);
  });
  r.add("aten.new_zeros.default", [](OpCall& c) {
    std::array<int64_t, kMaxDims> shape{};
    int nd = c.ints(1, shape);
    fill(c, std::span<const int64_t>(shape.data(), nd), 0.0);
  });
  r.add("aten.arange.default", [](OpCall& c) { arange(c, 0, c.real(0), 1); });
  r.add("aten.arange.start", [](OpCall& c) { arange(c, c.real(0), c.real(1), 1); });
  r.add("aten.arange.start_step", [](OpCall& c) { arange(c, c.real(0), c.real(1), c.real(2)); });
}

}  // namespace fuselm::runtime::ops
