// Ops that only re-describe memory: view, reshape, transpose, permute, slice, expand, split, ...
// They share the input's buffer (the executor's reference counts keep it alive).
#include <stdexcept>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// PyTorch's computeStride: strides for viewing `t` as `shape` without a copy, if possible.
bool view_strides(const Tensor& t, const int64_t* shape, int nd, std::array<int64_t, kMaxDims>& out) {
  if (t.numel() == 0) return false;
  int view_d = nd - 1;
  int64_t chunk_base_stride = t.ndim ? t.strides[t.ndim - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = t.ndim - 1; td >= 0; --td) {
    tensor_numel *= t.shape[td];
    if (td == 0 || (t.shape[td - 1] != 1 && t.strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = t.strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

int infer_shape(OpCall& c, const Tensor& t, size_t arg, std::array<int64_t, kMaxDims>& shape) {
  int nd = c.ints(arg, shape);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < nd; ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) c.fail("more than one -1 in a shape");
      infer = i;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known ? t.numel() / known : 0;
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= shape[i];
  if (n != t.numel()) c.fail("cannot view " + t.describe() + " with " + std::to_string(n) + " elements");
  return nd;
}

// t as `shape`: a view when the strides allow one, else a contiguous copy (reshape) or an error.
void view_as(OpCall& c, const Tensor& t, const std::array<int64_t, kMaxDims>& shape, int nd, bool allow_copy) {
  std::array<int64_t, kMaxDims> strides{};
  Tensor out = t;
  out.ndim = nd;
  if (t.is_contiguous()) {
    out = Tensor::contiguous_view(t.data, t.dtype, std::span<const int64_t>(shape.data(), nd));
    out.buffer = t.buffer;
  } else if (view_strides(t, shape.data(), nd, strides)) {
    for (int i = 0; i < nd; ++i) {
      out.shape[i] = shape[i];
      out.strides[i] = strides[i];
    }
  } else if (allow_copy) {
    out = c.alloc(t.dtype, std::span<const int64_t>(shape.data(), nd));
    Tensor src = t;  // copy in the source's own shape, then reinterpret
    Tensor dst = Tensor::contiguous_view(out.data, t.dtype, t.sizes());
    copy_into(src, dst);
  } else {
    c.fail("view of non-contiguous " + t.describe() + " is not possible; the graph should use reshape");
  }
  set_out(c, out);
}

void do_view(OpCall& c, bool allow_copy) {
  const Tensor& t = c.tensor(0);
  std::array<int64_t, kMaxDims> shape{};
  int nd = infer_shape(c, t, 1, shape);
  view_as(c, t, shape, nd, allow_copy);
}

void transpose(OpCall& c) {
  Tensor t = c.tensor(0);
  int a = wrap_dim(c.integer(1), t.ndim), b = wrap_dim(c.integer(2), t.ndim);
  std::swap(t.shape[a], t.shape[b]);
  std::swap(t.strides[a], t.strides[b]);
  set_out(c, t);
}

void permute(OpCall& c) {
  const Tensor& t = c.tensor(0);
  std::array<int64_t, kMaxDims> dims{};
  int nd = c.ints(1, dims);
  if (nd != t.ndim) c.fail("permute needs one index per dimension");
  Tensor out = t;
  for (int i = 0; i < nd; ++i) {
    int d = wrap_dim(dims[i], t.ndim);
    out.shape[i] = t.shape[d];
    out.strides[i] = t.strides[d];
  }
  set_out(c, out);
}

void unsqueeze(OpCall& c) {
  Tensor t = c.tensor(0);
  int d = wrap_dim(c.integer(1), t.ndim + 1);
  for (int i = t.ndim; i > d; --i) {
    t.shape[i] = t.shape[i - 1];
    t.strides[i] = t.strides[i - 1];
  }
  t.shape[d] = 1;
  t.strides[d] = d + 1 < t.ndim + 1 ? t.strides[d + 1] * t.shape[d + 1] : 1;
  ++t.ndim;
  set_out(c, t);
}

void squeeze_dims(OpCall& c, const std::array<int64_t, kMaxDims>* dims, int nd) {
  Tensor t = c.tensor(0);
  Tensor out = t;
  out.ndim = 0;
  for (int i = 0; i < t.ndim; ++i) {
    bool listed = dims == nullptr;
    for (int k = 0; dims && k < nd; ++k) listed |= wrap_dim((*dims)[k], t.ndim) == i;
    if (listed && t.shape[i] == 1) continue;
    out.shape[out.ndim] = t.shape[i];
    out.strides[out.ndim] = t.strides[i];
    ++out.ndim;
  }
  set_out(c, out);
}

void slice(OpCall& c) {
  Tensor t = c.tensor(0);
  int d = wrap_dim(c.integer(1), t.ndim);
  const int64_t n = t.shape[d];
  int64_t start = c.has(2) ? c.integer(2) : 0;
  int64_t end = c.has(3) ? c.integer(3) : n;
  int64_t step = c.has(4) ? c.integer(4) : 1;
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  t.data = static_cast<char*>(t.data) + start * t.strides[d] * ir::dtype_size(t.dtype);
  t.shape[d] = (end - start + step - 1) / step;
  t.strides[d] *= step;
  set_out(c, t);
}

void select(OpCall& c) {
  Tensor t = c.tensor(0);
  int d = wrap_dim(c.integer(1), t.ndim);
  int64_t i = c.integer(2);
  if (i < 0) i += t.shape[d];
  if (i < 0 || i >= t.shape[d]) c.fail("select index out of range");
  t.data = static_cast<char*>(t.data) + i * t.strides[d] * ir::dtype_size(t.dtype);
  for (int k = d; k + 1 < t.ndim; ++k) {
    t.shape[k] = t.shape[k + 1];
    t.strides[k] = t.strides[k + 1];
  }
  --t.ndim;
  set_out(c, t);
}

void expand(OpCall& c) {
  const Tensor& t = c.tensor(0);
  std::array<int64_t, kMaxDims> shape{};
  int nd = c.ints(1, shape);
  if (nd < t.ndim) c.fail("expand to fewer dimensions");
  Tensor out = t;
  out.ndim = nd;
  for (int i = nd - 1; i >= 0; --i) {
    int it = t.ndim - nd + i;
    int64_t s = it >= 0 ? t.shape[it] : 1;
    if (shape[i] == -1) shape[i] = s;
    if (it >= 0 && s == shape[i]) {
      out.strides[i] = t.strides[it];
    } else if (s == 1) {
      out.strides[i] = 0;
    } else {
      c.fail("cannot expand " + t.describe());
    }
    out.shape[i] = shape[i];
  }
  set_out(c, out);
}

// split / split_with_sizes / chunk / unbind produce lists of views along one dim.
void split_sizes(OpCall& c, const Tensor& t, int d, const int64_t* sizes, int count) {
  c.out.kind = Value::Kind::list;
  c.out.list.resize(count);
  int64_t off = 0;
  for (int k = 0; k < count; ++k) {
    Tensor part = t;
    part.data = static_cast<char*>(t.data) + off * t.strides[d] * ir::dtype_size(t.dtype);
    part.shape[d] = sizes[k];
    c.out.list[k].set_tensor(part);
    off += sizes[k];
  }
  if (off != t.shape[d]) c.fail("split sizes do not add up to the dimension");
}

void split_tensor(OpCall& c) {  // split.Tensor(self, split_size, dim)
  const Tensor& t = c.tensor(0);
  int d = wrap_dim(c.integer(2), t.ndim);
  int64_t size = c.integer(1);
  std::array<int64_t, 64> sizes{};
  int count = 0;
  for (int64_t off = 0; off < t.shape[d]; off += size) {
    if (count == 64) c.fail("split into more than 64 parts");
    sizes[count++] = std::min(size, t.shape[d] - off);
  }
  split_sizes(c, t, d, sizes.data(), count);
}

void split_with_sizes(OpCall& c) {
  const Tensor& t = c.tensor(0);
  std::array<int64_t, kMaxDims> sizes{};
  int count = c.ints(1, sizes);
  split_sizes(c, t, wrap_dim(c.integer(2), t.ndim), sizes.data(), count);
}

void chunk(OpCall& c) {  // chunk(self, chunks, dim)
  const Tensor& t = c.tensor(0);
  int d = wrap_dim(c.integer(2), t.ndim);
  int64_t chunks = c.integer(1);
  int64_t size = (t.shape[d] + chunks - 1) / chunks;
  std::array<int64_t, 64> sizes{};
  int count = 0;
  for (int64_t off = 0; off < t.shape[d]; off += size) sizes[count++] = std::min(size, t.shape[d] - off);
  split_sizes(c, t, d, sizes.data(), count);
}

void unbind(OpCall& c) {
  const Tensor& t = c.tensor(0);
  int d = wrap_dim(c.integer(1), t.ndim);
  c.out.kind = Value::Kind::list;
  c.out.list.resize(t.shape[d]);
  for (int64_t k = 0; k < t.shape[d]; ++k) {
    Tensor part = t;
    part.data = static_cast<char*>(t.data) + k * t.strides[d] * ir::dtype_size(t.dtype);
    for (int j = d; j + 1 < t.ndim; ++j) {
      part.shape[j] = t.shape[j + 1];
      part.strides[j] = t.strides[j + 1];
    }
    --part.ndim;
    c.out.list[k].set_tensor(part);
  }
}

void identity(OpCall& c) { set_out(c, c.tensor(0)); }

void flatten(OpCall& c) {  // flatten.using_ints(self, start_dim, end_dim)
  const Tensor& t = c.tensor(0);
  int s = wrap_dim(c.integer(1), t.ndim), e = wrap_dim(c.integer(2), t.ndim);
  std::array<int64_t, kMaxDims> shape{};
  int nd = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (i > s && i <= e) {
      shape[nd - 1] *= t.shape[i];
    } else {
      shape[nd++] = t.shape[i];
    }
  }
  view_as(c, t, shape, nd, true);  // like reshape: a view when possible, else a copy
}

}  // namespace

void register_view_ops(OpRegistry& r) {
  r.add("aten.view.default", [](OpCall& c) { do_view(c, false); });
  r.add("aten._unsafe_view.default", [](OpCall& c) { do_view(c, true); });
  r.add("aten.reshape.default", [](OpCall& c) { do_view(c, true); });
  r.add("aten.transpose.int", transpose);
  r.add("aten.t.default", [](OpCall& c) {
    Tensor t = c.tensor(0);
    if (t.ndim == 2) {
      std::swap(t.shape[0], t.shape[1]);
      std::swap(t.strides[0], t.strides[1]);
    }
    set_out(c, t);
  });
  r.add("aten.permute.default", permute);
  r.add("aten.unsqueeze.default", unsqueeze);
  r.add("aten.squeeze.dim", [](OpCall& c) {
    std::array<int64_t, kMaxDims> d{c.integer(1)};
    squeeze_dims(c, &d, 1);
  });
  r.add("aten.squeeze.dims", [](OpCall& c) {
    std::array<int64_t, kMaxDims> d{};
    int n = c.ints(1, d);
    squeeze_dims(c, &d, n);
  });
  r.add("aten.squeeze.default", [](OpCall& c) { squeeze_dims(c, nullptr, 0); });
  r.add("aten.slice.Tensor", slice);
  r.add("aten.select.int", select);
  r.add("aten.expand.default", expand);
  r.add("aten.split.Tensor", split_tensor);
  r.add("aten.split_with_sizes.default", split_with_sizes);
  r.add("aten.chunk.default", chunk);
  r.add("aten.unbind.int", unbind);
  r.add("aten.flatten.using_ints", flatten);
  r.add("aten.alias.default", identity);
  r.add("aten.detach.default", identity);
  r.add("aten.lift_fresh_copy.default", identity);
  // Inference: dropout is the identity (the graph is captured in eval mode, train=False).
  r.add("aten.dropout.default", identity);
}

}  // namespace fuselm::runtime::ops
