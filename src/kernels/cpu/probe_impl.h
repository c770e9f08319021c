// Loops of the machine probes over Vec<Isa> (internal; included like linear_impl.h).
namespace fuselm::kernels {
namespace {  // NOLINT

template <Isa I>
float stream_sum_impl(const float* x, size_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr size_t W = V::W;
  R s[8];
  FUSELM_UNROLL(8)
  for (int j = 0; j < 8; ++j) s[j] = V::zero();
  size_t i = 0;
  for (; i + 8 * W <= n; i += 8 * W) {
    FUSELM_UNROLL(8)
    for (size_t j = 0; j < 8; ++j) s[j] = V::add(s[j], V::load(x + i + j * W));
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += x[i];
  R t = V::add(V::add(V::add(s[0], s[1]), V::add(s[2], s[3])),
               V::add(V::add(s[4], s[5]), V::add(s[6], s[7])));
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
  return {&stream_sum_impl<I>, &fma_chains_impl<I>};
}

}  // namespace
}  // namespace fuselm::kernels
