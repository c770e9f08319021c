// Attention body over Vec<Isa> (internal; included like linear_impl.h, after simd_math.h).
//
// One (token, head) pair: keys in chunks of 64; per chunk the logits (4 keys at a time sharing the
// q loads), softcap, one online-softmax rescale, exponentials, then out += p·V (4 keys at a time,
// one load/store of the out row per 4 keys). The out row itself is the accumulator.
namespace fuselm::kernels {
namespace {  // NOLINT

template <class V>
FUSELM_INLINE void dot4(const float* q, const float* k0, const float* k1, const float* k2,
                        const float* k3, int64_t d, float* s) {
  using R = typename V::R;
  constexpr int W = V::W;
  R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    const R qv = V::load(q + i);
    a0 = V::fma(qv, V::load(k0 + i), a0);
    a1 = V::fma(qv, V::load(k1 + i), a1);
    a2 = V::fma(qv, V::load(k2 + i), a2);
    a3 = V::fma(qv, V::load(k3 + i), a3);
  }
  if (i < d) {
    const int r = static_cast<int>(d - i);
    const R qv = V::loadn(q + i, r);
    a0 = V::fma(qv, V::loadn(k0 + i, r), a0);
    a1 = V::fma(qv, V::loadn(k1 + i, r), a1);
    a2 = V::fma(qv, V::loadn(k2 + i, r), a2);
    a3 = V::fma(qv, V::loadn(k3 + i, r), a3);
  }
  s[0] = V::hsum(a0);
  s[1] = V::hsum(a1);
  s[2] = V::hsum(a2);
  s[3] = V::hsum(a3);
}

template <class V>
FUSELM_INLINE float dot1(const float* q, const float* k, int64_t d) {
  using R = typename V::R;
  constexpr int W = V::W;
  R a = V::zero();
  int64_t i = 0;
  for (; i + W <= d; i += W) a = V::fma(V::load(q + i), V::load(k + i), a);
  if (i < d) {
    const int r = static_cast<int>(d - i);
    a = V::fma(V::loadn(q + i, r), V::loadn(k + i, r), a);
  }
  return V::hsum(a);
}

// o[0, d) = o · alpha + sum_c p[c] · v_c[0, d) over n rows (n <= 4)
template <class V, int N>
FUSELM_INLINE void axpy_rows(float* o, float alpha, const float* p, const float* const* v, int64_t d) {
  using R = typename V::R;
  constexpr int W = V::W;
  R pc[N];
  FUSELM_UNROLL(4)
  for (int c = 0; c < N; ++c) pc[c] = V::set1(p[c]);
  const R al = V::set1(alpha);
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    R acc = V::mul(V::load(o + i), al);
    FUSELM_UNROLL(4)
    for (int c = 0; c < N; ++c) acc = V::fma(pc[c], V::load(v[c] + i), acc);
    V::store(o + i, acc);
  }
  if (i < d) {
    const int r = static_cast<int>(d - i);
    R acc = V::mul(V::loadn(o + i, r), al);
    FUSELM_UNROLL(4)
    for (int c = 0; c < N; ++c) acc = V::fma(pc[c], V::loadn(v[c] + i, r), acc);
    V::storen(o + i, acc, r);
  }
}

template <Isa I>
void attend_impl(const AttentionArgs& a, int64_t ti, int64_t h) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int CH = 64;
  alignas(64) float s[CH];

  const int64_t kvh = h / (a.hq / a.hkv);
  const float* q = a.q + ti * a.q_token_stride + h * a.q_head_stride;
  const int64_t pos = a.ctx_len - a.t + ti;
  const int64_t lo = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
  const int64_t k_row = a.hkv * a.dqk, v_row = a.hkv * a.dv;
  const float* kc = a.k_cache + kvh * a.dqk;
  const float* vc = a.v_cache + kvh * a.dv;
  const int64_t dqk = a.dqk, dv = a.dv;
  const float scale = a.scale, cap = a.softcap;
  float* o = a.out + (ti * a.hq + h) * dv;

  float m = a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity();
  float l = a.sinks ? 1.f : 0.f;
  for (int64_t i = 0; i < dv; ++i) o[i] = 0.f;

  for (int64_t j0 = lo; j0 <= pos; j0 += CH) {
    const int n = static_cast<int>(std::min<int64_t>(CH, pos + 1 - j0));
    const int32_t* sl = a.slots + j0;
    int c = 0;
    for (; c + 4 <= n; c += 4)
      dot4<V>(q, kc + sl[c] * k_row, kc + sl[c + 1] * k_row, kc + sl[c + 2] * k_row,
              kc + sl[c + 3] * k_row, dqk, s + c);
    for (; c < n; ++c) s[c] = dot1<V>(q, kc + sl[c] * k_row, dqk);

    // scale, softcap, chunk max
    R mx = V::set1(-std::numeric_limits<float>::infinity());
    const R sc = V::set1(scale);
    for (c = 0; c < n; c += W) {
      const int r = std::min(W, n - c);
      R x = V::mul(V::loadn(s + c, r), sc);
      if (cap > 0.f) x = V::mul(V::set1(cap), vtanh<V>(V::mul(x, V::set1(1.f / cap))));
      V::storen(s + c, x, r);
      if (r < W) {  // lanes past the chunk must not raise the max
        alignas(64) float buf[W];
        V::store(buf, x);
        for (int z = r; z < W; ++z) buf[z] = -std::numeric_limits<float>::infinity();
        x = V::load(buf);
      }
      mx = V::max(mx, x);
    }
    const float m_new = std::max(m, V::hmax(mx));
    const float alpha = m == m_new ? 1.f : std::exp(m - m_new);  // exp(-inf) = 0 at the start
    l *= alpha;

    R sum = V::zero();
    const R mv = V::set1(m_new);
    for (c = 0; c < n; c += W) {
      const int r = std::min(W, n - c);
      R e = V::exp(V::sub(V::loadn(s + c, r), mv));
      V::storen(s + c, e, r);
      if (r < W) {
        alignas(64) float buf[W];
        V::store(buf, e);
        for (int z = r; z < W; ++z) buf[z] = 0.f;
        e = V::load(buf);
      }
      sum = V::add(sum, e);
    }
    l += V::hsum(sum);

    const float* vr[4];
    c = 0;
    float al = alpha;  // the rescale rides on the first update of this chunk
    for (; c + 4 <= n; c += 4) {
      for (int z = 0; z < 4; ++z) vr[z] = vc + sl[c + z] * v_row;
      axpy_rows<V, 4>(o, al, s + c, vr, dv);
      al = 1.f;
    }
    for (; c < n; ++c) {
      vr[0] = vc + sl[c] * v_row;
      axpy_rows<V, 1>(o, al, s + c, vr, dv);
      al = 1.f;
    }
    m = m_new;
  }
  const R inv = V::set1(1.f / l);
  int64_t i = 0;
  for (; i + W <= dv; i += W) V::store(o + i, V::mul(V::load(o + i), inv));
  if (i < dv) {
    const int r = static_cast<int>(dv - i);
    V::storen(o + i, V::mul(V::loadn(o + i, r), inv), r);
  }
}

template <Isa I>
constexpr AttentionKernels make_attention_kernels() {
  return {&attend_impl<I>};
}

}  // namespace
}  // namespace fuselm::kernels
