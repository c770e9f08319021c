#include "kernels/cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace fuselm::kernels {
namespace {

// Calls f(line, offset of the line's first element in x, offset in out) for every line of x along
// dim (line: row-major index over x's other dims), lines split over the thread pool.
template <class F>
void for_each_line(const Strided& x, int dim, const Strided& out, F f) {
  Strided rest = x;
  rest.shape[dim] = 1;
  const int64_t lines = rest.numel();
  parallel_for_ranges(strided_threads(x.numel()), lines, 1, [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) f(l, offset_of(l, rest, x.strides), offset_of(l, rest, out.strides));
  });
}

}  // namespace

void topk(const Strided& x, int d, int64_t k, bool largest, const Strided& vals, const Strided& idx) {
  const int64_t w = x.shape[d];
  for_each_line(x, d, vals, [&](int64_t l, int64_t base, int64_t ob) {
    thread_local std::vector<double> v;
    thread_local std::vector<int64_t> order;
    v.resize(static_cast<size_t>(w));
    order.resize(static_cast<size_t>(w));
    for (int64_t j = 0; j < w; ++j) v[j] = load_double(x, base + j * x.strides[d]);
    std::iota(order.begin(), order.end(), 0);
    // NaN counts as the largest value, as in PyTorch.
    auto before = [&](int64_t a, int64_t b) {
      const double va = v[a], vb = v[b];
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na || nb) return largest ? (na && !nb) || (na && nb && a < b) : (!na && nb) || (na && nb && a < b);
      if (va != vb) return largest ? va > vb : va < vb;
      return a < b;
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    Strided line = vals;
    line.shape[d] = 1;
    const int64_t oi = offset_of(l, line, idx.strides);
    for (int64_t j = 0; j < k; ++j) {
      store_double(vals, ob + j * vals.strides[d], v[order[j]]);
      idx.ptr<int64_t>()[oi + j * idx.strides[d]] = order[j];
    }
  });
}

void max_dim(const Strided& x, int d, const Strided& vals, const Strided& idx) {
  const int64_t w = x.shape[d];
  for_each_line(x, d, x, [&](int64_t l, int64_t base, int64_t) {
    int64_t best = 0;
    double bv = load_double(x, base);
    for (int64_t j = 1; j < w && !std::isnan(bv); ++j) {
      const double vj = load_double(x, base + j * x.strides[d]);
      if (vj > bv || std::isnan(vj)) {
        bv = vj;
        best = j;
      }
    }
    store_double(vals, l, bv);
    idx.ptr<int64_t>()[l] = best;
  });
}

}  // namespace fuselm::kernels
