// Row normalisation bodies over Vec<Isa> and their per-ISA table (internal). norm.cc includes it
// for the generic table; CMake writes the avx2 and avx512 tables from the line below.
// isa-table: NormKernels make_norm_kernels avx2 avx512
#include <cstdint>

namespace fuselm::kernels {

/// Per-ISA kernel table of the row normalisations. Each entry handles one row.
struct NormKernels {
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t width, float eps, float w_offset);
  void (*layer_norm)(const float* x, const float* w, const float* b, float* y, int64_t width, float eps);
  void (*softmax)(const float* x, float* y, int64_t width);
};

extern const NormKernels kNormKernelsGeneric;

namespace {  // NOLINT

// sum of f(x[i]) over a row, with 4 vector accumulators
template <class V, class F>
FUSELM_INLINE float row_sum(const float* x, int64_t n, F f) {
  using R = typename V::R;
  constexpr int W = V::W;
  R s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    s0 = V::add(s0, f(V::load(x + i)));
    s1 = V::add(s1, f(V::load(x + i + W)));
    s2 = V::add(s2, f(V::load(x + i + 2 * W)));
    s3 = V::add(s3, f(V::load(x + i + 3 * W)));
  }
  for (; i + W <= n; i += W) s0 = V::add(s0, f(V::load(x + i)));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    // f(0) need not be 0: mask the tail result rather than the input
    const R t = f(V::loadn(x + i, r));
    alignas(64) float buf[V::W];
    V::store(buf, t);
    for (int j = r; j < W; ++j) buf[j] = 0.f;
    s1 = V::add(s1, V::load(buf));
  }
  return V::hsum(V::add(V::add(s0, s1), V::add(s2, s3)));
}

template <Isa I>
void rms_norm_row(const float* x, const float* w, float* y, int64_t n, float eps, float w_offset) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const float ss = row_sum<V>(x, n, [](R v) { return V::mul(v, v); });
  const R s = V::set1(1.f / std::sqrt(ss / static_cast<float>(n) + eps));
  const R off = V::set1(w_offset);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    R v = V::mul(V::load(x + i), s);
    if (w) v = V::mul(v, V::add(V::load(w + i), off));
    V::store(y + i, v);
  }
  if (i < n) {
    const int r = static_cast<int>(n - i);
    R v = V::mul(V::loadn(x + i, r), s);
    if (w) v = V::mul(v, V::add(V::loadn(w + i, r), off));
    V::storen(y + i, v, r);
  }
}

template <Isa I>
void layer_norm_row(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const float mean = row_sum<V>(x, n, [](R v) { return v; }) / static_cast<float>(n);
  const R mv = V::set1(mean);
  const float var =
      row_sum<V>(x, n, [mv](R v) { const R d = V::sub(v, mv); return V::mul(d, d); }) /
      static_cast<float>(n);
  const R s = V::set1(1.f / std::sqrt(var + eps));
  auto one = [&](R v, const float* wp, const float* bp, int r) {
    v = V::mul(V::sub(v, mv), s);
    if (wp) v = V::mul(v, r == W ? V::load(wp) : V::loadn(wp, r));
    if (bp) v = V::add(v, r == W ? V::load(bp) : V::loadn(bp, r));
    return v;
  };
  int64_t i = 0;
  for (; i + W <= n; i += W)
    V::store(y + i, one(V::load(x + i), w ? w + i : nullptr, b ? b + i : nullptr, W));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V::storen(y + i, one(V::loadn(x + i, r), w ? w + i : nullptr, b ? b + i : nullptr, r), r);
  }
}

template <Isa I>
void softmax_row(const float* x, float* y, int64_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  R mx = V::set1(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + W <= n; i += W) mx = V::max(mx, V::load(x + i));
  float m = V::hmax(mx);
  for (; i < n; ++i) m = std::max(m, x[i]);
  const R mv = V::set1(m);
  R sum = V::zero();
  for (i = 0; i + W <= n; i += W) {
    const R e = V::exp(V::sub(V::load(x + i), mv));
    sum = V::add(sum, e);
    V::store(y + i, e);
  }
  float s = V::hsum(sum);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    alignas(64) float buf[V::W];
    V::store(buf, V::exp(V::sub(V::loadn(x + i, r), mv)));
    for (int j = 0; j < r; ++j) s += buf[j];
    V::storen(y + i, V::load(buf), r);
  }
  const R inv = V::set1(1.f / s);
  for (i = 0; i + W <= n; i += W) V::store(y + i, V::mul(V::load(y + i), inv));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V::storen(y + i, V::mul(V::loadn(y + i, r), inv), r);
  }
}

template <Isa I>
constexpr NormKernels make_norm_kernels() {
  return {&rms_norm_row<I>, &layer_norm_row<I>, &softmax_row<I>};
}

}  // namespace
}  // namespace fuselm::kernels
