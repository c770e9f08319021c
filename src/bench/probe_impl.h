// Loops of the machine probes over Vec<Isa> (internal; included like linear_impl.h). probe.cc
// includes it for the generic table; CMake writes the avx2 and avx512 tables from the line below.
// isa-table: ProbeKernels make_probe_kernels avx2 avx512
namespace fuselm::bench {
namespace {  // NOLINT

using kernels::Isa;
using kernels::Vec;

// Reads x[0..n) as S interleaved sequential streams, 2 accumulators per stream. Which S reads
// fastest depends on the CPU's prefetchers: 4 streams keep more lines in flight on Sapphire
// Rapids, one stream in memory order is faster on Zen 4 (session 7), so the probe tries both.
template <Isa I, size_t S>
float stream_sum_impl(const float* x, size_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr size_t W = V::W, L = 64 / sizeof(float);  // floats per cache line
  R s[2 * S];
  FUSELM_UNROLL(8)
  for (size_t j = 0; j < 2 * S; ++j) s[j] = V::zero();
  const size_t part = n / S / L * L;
  for (size_t i = 0; i < part; i += L) {
    FUSELM_UNROLL(4)
    for (size_t t = 0; t < S; ++t) {
      const float* p = x + t * part + i;
      FUSELM_UNROLL(16)
      for (size_t j = 0; j < L; j += W) s[2 * t + (j / W) % 2] = V::add(s[2 * t + (j / W) % 2], V::load(p + j));
    }
  }
  float tail = 0.f;
  for (size_t i = S * part; i < n; ++i) tail += x[i];
  R t = s[0];
  FUSELM_UNROLL(8)
  for (size_t j = 1; j < 2 * S; ++j) t = V::add(t, s[j]);
  return V::hsum(t) + tail;
}

template <Isa I>
float fma_chains_impl(int64_t iters, double* flops) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int C = 16;  // independent chains: covers latency × ports on current cores
  R acc[C];
  FUSELM_UNROLL(16)
  for (int c = 0; c < C; ++c) acc[c] = V::set1(static_cast<float>(c) * 1e-3f);
  const R a = V::set1(0.999999f), b = V::set1(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    FUSELM_UNROLL(16)
    for (int c = 0; c < C; ++c) acc[c] = V::fma(acc[c], a, b);
  }
  R t = acc[0];
  FUSELM_UNROLL(16)
  for (int c = 1; c < C; ++c) t = V::add(t, acc[c]);
  *flops = 2.0 * V::W * C * static_cast<double>(iters);
  return V::hsum(t);
}

template <Isa I>
constexpr ProbeKernels make_probe_kernels() {
  return {&stream_sum_impl<I, 4>, &stream_sum_impl<I, 1>, &fma_chains_impl<I>};
}

}  // namespace
}  // namespace fuselm::bench
