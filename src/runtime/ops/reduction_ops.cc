// Reductions over the last dimensions: mean, sum, amax, softmax, cumsum, layer_norm.
#include <cmath>
#include <limits>

#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// Reduces dims listed in argument 1 (all when empty); keepdim in argument 2.
template <typename Init, typename Acc, typename Fin>
void reduce(OpCall& c, Init init, Acc acc, Fin fin) {
  const Tensor& x = c.tensor(0);
  std::array<int64_t, kMaxDims> dims{};
  int nd = c.has(1) ? c.ints(1, dims) : 0;
  bool keep = c.has(2) && c.boolean(2);
  std::array<bool, kMaxDims> red{};
  if (nd == 0) red.fill(true);
  for (int i = 0; i < nd; ++i) red[wrap_dim(dims[i], x.ndim)] = true;
  std::array<int64_t, kMaxDims> oshape{};
  int ond = 0;
  int64_t count = 1;
  for (int d = 0; d < x.ndim; ++d) {
    if (red[d]) {
      count *= x.shape[d];
      if (keep) oshape[ond++] = 1;
    } else {
      oshape[ond++] = x.shape[d];
    }
  }
  Tensor out = c.alloc(c.out_dtype(), std::span<const int64_t>(oshape.data(), ond));
  // Fast path: contiguous fp32 reducing the trailing dims.
  bool trailing = true;
  for (int d = 0, seen = 0; d < x.ndim; ++d) {
    if (red[d]) seen = 1;
    else if (seen) trailing = false;
  }
  if (trailing && x.dtype == DType::f32 && x.is_contiguous() && out.dtype == DType::f32) {
    const int64_t rows = x.numel() / std::max<int64_t>(count, 1);
    const float* p = x.ptr<float>();
    float* o = out.ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double a = init();
      for (int64_t k = 0; k < count; ++k) a = acc(a, p[r * count + k]);
      o[r] = static_cast<float>(fin(a, count));
    }
    set_out(c, out);
    return;
  }
  // General path: accumulate in doubles over every element.
  const int64_t n = out.numel();
  std::vector<double> accs(n, init());
  std::array<int64_t, kMaxDims> idx{};
  const int64_t total = x.numel();
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0, o = 0, ostride = 1;
    for (int d = x.ndim - 1; d >= 0; --d) {
      off += idx[d] * x.strides[d];
      if (!red[d]) {
        o += idx[d] * ostride;
        ostride *= x.shape[d];
      }
    }
    accs[o] = acc(accs[o], load_double(x, off));
    for (int d = x.ndim - 1; d >= 0; --d) {
      if (++idx[d] < x.shape[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < n; ++i) store_double(out, i, fin(accs[i], count));
  set_out(c, out);
}

// softmax over any dim d: rows of width shape[d], elements `inner` apart in the contiguous copy.
void softmax(OpCall& c) {
  const Tensor& x = c.tensor(0);
  int d = wrap_dim(c.integer(1), x.ndim);
  Scratch s(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, s);
  Tensor out = c.alloc(DType::f32, x.sizes());
  int64_t inner = 1;
  for (int k = d + 1; k < x.ndim; ++k) inner *= x.shape[k];
  const int64_t w = x.shape[d], rows = x.numel() / std::max<int64_t>(w, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (r / inner) * w * inner + r % inner;
    const float* p = xc.ptr<float>() + base;
    float* o = out.ptr<float>() + base;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < w; ++k) m = std::max(m, p[k * inner]);
    double sum = 0;
    for (int64_t k = 0; k < w; ++k) sum += (o[k * inner] = std::exp(p[k * inner] - m));
    for (int64_t k = 0; k < w; ++k) o[k * inner] = static_cast<float>(o[k * inner] / sum);
  }
  if (c.out_dtype() != DType::f32) {
    Tensor conv = c.alloc(c.out_dtype(), x.sizes());
    copy_into(out, conv);
    c.ctx.release(out.buffer);
    out = conv;
  }
  set_out(c, out);
}

void cumsum(OpCall& c) {
  const Tensor& x = c.tensor(0);
  int d = wrap_dim(c.integer(1), x.ndim);
  Scratch s(c.ctx);
  Tensor xc = contiguous_as(x, DType::f64, s);
  Tensor out = c.alloc(c.out_dtype(), x.sizes());
  int64_t inner = 1;
  for (int k = d + 1; k < x.ndim; ++k) inner *= x.shape[k];
  const int64_t outer = x.numel() / std::max<int64_t>(inner * x.shape[d], 1);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < x.shape[d]; ++k) {
        int64_t off = (o * x.shape[d] + k) * inner + i;
        acc += xc.ptr<double>()[off];
        store_double(out, off, acc);
      }
    }
  set_out(c, out);
}

// layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable) over the trailing dims.
void layer_norm(OpCall& c) {
  const Tensor& x = c.tensor(0);
  std::array<int64_t, kMaxDims> ns{};
  int nn = c.ints(1, ns);
  int64_t w = 1;
  for (int i = 0; i < nn; ++i) w *= ns[i];
  double eps = c.real(4);
  Scratch s1(c.ctx), s2(c.ctx), s3(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, s1);
  Tensor wt, bt;
  if (c.has(2)) wt = contiguous_as(c.tensor(2), DType::f32, s2);
  if (c.has(3)) bt = contiguous_as(c.tensor(3), DType::f32, s3);
  Tensor out = c.alloc(DType::f32, x.sizes());
  const int64_t rows = x.numel() / std::max<int64_t>(w, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = xc.ptr<float>() + r * w;
    float* o = out.ptr<float>() + r * w;
    double mean = 0;
    for (int64_t k = 0; k < w; ++k) mean += p[k];
    mean /= w;
    double var = 0;
    for (int64_t k = 0; k < w; ++k) var += (p[k] - mean) * (p[k] - mean);
    var /= w;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < w; ++k) {
      double v = (p[k] - mean) * inv;
      if (wt.data) v *= wt.ptr<float>()[k];
      if (bt.data) v += bt.ptr<float>()[k];
      o[k] = static_cast<float>(v);
    }
  }
  set_out(c, out);
}

}  // namespace

void register_reduction_ops(OpRegistry& r) {
  r.add("aten.mean.dim", [](OpCall& c) {
    reduce(c, [] { return 0.0; }, [](double a, double x) { return a + x; }, [](double a, int64_t n) { return a / n; });
  });
  r.add("aten.sum.dim_IntList", [](OpCall& c) {
    reduce(c, [] { return 0.0; }, [](double a, double x) { return a + x; }, [](double a, int64_t) { return a; });
  });
  r.add("aten.amax.default", [](OpCall& c) {
    reduce(c, [] { return -std::numeric_limits<double>::infinity(); }, [](double a, double x) { return std::max(a, x); },
           [](double a, int64_t) { return a; });
  });
  r.add("aten.softmax.int", softmax);
  r.add("aten._softmax.default", softmax);
  r.add("aten.cumsum.default", cumsum);
  r.add("aten.layer_norm.default", layer_norm);
}

}  // namespace fuselm::runtime::ops
