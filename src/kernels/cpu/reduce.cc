#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fuselm::kernels {
namespace {

struct Sum {
  static double init() { return 0.0; }
  static double acc(double a, double x) { return a + x; }
  static double fin(double a, int64_t) { return a; }
};
struct Mean {
  static double init() { return 0.0; }
  static double acc(double a, double x) { return a + x; }
  static double fin(double a, int64_t n) { return a / n; }
};
struct Amax {
  static double init() { return -std::numeric_limits<double>::infinity(); }
  static double acc(double a, double x) { return std::max(a, x); }
  static double fin(double a, int64_t) { return a; }
};

template <class R>
void reduce_impl(const Strided& x, const std::array<bool, kMaxStridedDims>& red, const Strided& out) {
  int64_t count = 1;
  bool trailing = true;
  for (int d = 0, seen = 0; d < x.ndim; ++d) {
    if (red[d]) {
      count *= x.shape[d];
      seen = 1;
    } else if (seen) {
      trailing = false;
    }
  }
  if (trailing && x.dtype == DType::f32 && x.contiguous() && out.dtype == DType::f32) {
    const int64_t rows = x.numel() / std::max<int64_t>(count, 1);
    const float* p = x.ptr<float>();
    float* o = out.ptr<float>();
    parallel_for_ranges(strided_threads(rows * count), rows, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        double a = R::init();
        for (int64_t k = 0; k < count; ++k) a = R::acc(a, p[r * count + k]);
        o[r] = static_cast<float>(R::fin(a, count));
      }
    });
    return;
  }
  // General path: accumulate in doubles over every element (one thread: outputs share rows).
  const int64_t n = out.numel();
  std::vector<double> accs(n, R::init());
  std::array<int64_t, kMaxStridedDims> idx{};
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
    accs[o] = R::acc(accs[o], load_double(x, off));
    for (int d = x.ndim - 1; d >= 0; --d) {
      if (++idx[d] < x.shape[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < n; ++i) store_double(out, i, R::fin(accs[i], count));
}

// Product of the sizes after `dim` (the distance of neighbours along dim in a contiguous view).
int64_t inner_of(const Strided& x, int dim) {
  int64_t inner = 1;
  for (int k = dim + 1; k < x.ndim; ++k) inner *= x.shape[k];
  return inner;
}

}  // namespace

void reduce(ReduceFn fn, const Strided& x, const std::array<bool, kMaxStridedDims>& reduced, const Strided& out) {
  switch (fn) {
    case ReduceFn::sum: return reduce_impl<Sum>(x, reduced, out);
    case ReduceFn::mean: return reduce_impl<Mean>(x, reduced, out);
    case ReduceFn::amax: return reduce_impl<Amax>(x, reduced, out);
  }
}

void softmax(const Strided& x, const Strided& out, int dim) {
  const int64_t inner = inner_of(x, dim);
  const int64_t w = x.shape[dim], rows = x.numel() / std::max<int64_t>(w, 1);
  parallel_for_ranges(strided_threads(rows * w), rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t base = (r / inner) * w * inner + r % inner;
      const float* p = x.ptr<float>() + base;
      float* o = out.ptr<float>() + base;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < w; ++k) m = std::max(m, p[k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < w; ++k) sum += (o[k * inner] = std::exp(p[k * inner] - m));
      for (int64_t k = 0; k < w; ++k) o[k * inner] = static_cast<float>(o[k * inner] / sum);
    }
  });
}

void cumsum(const Strided& x, const Strided& out, int dim) {
  const int64_t inner = inner_of(x, dim), len = x.shape[dim];
  const int64_t outer = x.numel() / std::max<int64_t>(inner * len, 1);
  const double* p = x.ptr<double>();
  parallel_for_ranges(strided_threads(outer * inner * len), outer * inner, 1, [&](int64_t b, int64_t e) {
    for (int64_t line = b; line < e; ++line) {
      const int64_t o = line / inner, i = line % inner;
      double acc = 0;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t off = (o * len + k) * inner + i;
        acc += p[off];
        store_double(out, off, acc);
      }
    }
  });
}

void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t width, double eps) {
  parallel_for_ranges(strided_threads(rows * width), rows, 1, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* p = x + r * width;
      float* o = out + r * width;
      double mean = 0;
      for (int64_t k = 0; k < width; ++k) mean += p[k];
      mean /= width;
      double var = 0;
      for (int64_t k = 0; k < width; ++k) var += (p[k] - mean) * (p[k] - mean);
      var /= width;
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t k = 0; k < width; ++k) {
        double v = (p[k] - mean) * inv;
        if (w) v *= w[k];
        if (b) v += b[k];
        o[k] = static_cast<float>(v);
      }
    }
  });
}

void row_sum_squares(const float* x, int64_t rows, int64_t width, float* out) {
  parallel_for_ranges(strided_threads(rows * width), rows, 1, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* p = x + r * width;
      double acc = 0.0;
      for (int64_t k = 0; k < width; ++k) acc += static_cast<double>(p[k]) * p[k];
      out[r] = static_cast<float>(acc);
    }
  });
}

void rms_scale_rows(const float* x, int64_t rows, int64_t width, const float* sums, int64_t full_width, float eps,
                    const float* w, float offset, float* out) {
  parallel_for_ranges(strided_threads(rows * width), rows, 1, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float inv = 1.0f / std::sqrt(sums[r] / static_cast<float>(full_width) + eps);
      const float* p = x + r * width;
      float* o = out + r * width;
      for (int64_t k = 0; k < width; ++k) o[k] = p[k] * inv * (w ? w[k] + offset : 1.0f);
    }
  });
}

}  // namespace fuselm::kernels
