// Attention body over Vec<Isa> (internal; included like linear_impl.h, after simd_math.h).
//
// Per (token, KV group, key range): keys in chunks of 64; per chunk and q head of the group the
// logits (4 keys at a time sharing the q loads), softcap, one online-softmax rescale, exponentials,
// then acc += p·V (4 keys at a time, one load/store of the accumulator row per 4 keys).
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
FUSELM_INLINE void axpy_rows(float* o, float alpha, const float* p, const float* const* v,
                             int64_t d) {
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

// The q heads [h0, h0 + nh) of one KV group, new token ti, against context keys [lo, hi): per head
// r, o[r] (dv floats) accumulates unnormalised p·V with running max m[r] and sum l[r] (set by the
// caller: -inf/0, or the sink). Keys go in chunks of 64; a chunk's K and V rows are read from
// memory once and then serve every head of the group from L1.
template <Isa I>
void attend_group_impl(const AttentionArgs& a, int64_t ti, int64_t h0, int64_t nh, int64_t lo,
                       int64_t hi, float* const* o, float* m, float* l) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int CH = 64;
  alignas(64) float s[CH];
  const float* kr[CH];
  const float* vr[CH];

  const int64_t kvh = h0 / (a.hq / a.hkv);
  const int64_t k_row = a.hkv * a.dqk, v_row = a.hkv * a.dv;
  const float* kc = a.k_cache + kvh * a.dqk;
  const float* vc = a.v_cache + kvh * a.dv;
  const int64_t dqk = a.dqk, dv = a.dv;
  const float scale = a.scale, cap = a.softcap;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  for (int64_t j0 = lo; j0 < hi; j0 += CH) {
    const int n = static_cast<int>(std::min<int64_t>(CH, hi - j0));
    for (int c = 0; c < n; ++c) {
      kr[c] = kc + a.slots[j0 + c] * k_row;
      vr[c] = vc + a.slots[j0 + c] * v_row;
    }
    for (int64_t r = 0; r < nh; ++r) {
      const float* q = a.q + ti * a.q_token_stride + (h0 + r) * a.q_head_stride;
      float* out = o[r];
      int c = 0;
      for (; c + 4 <= n; c += 4) dot4<V>(q, kr[c], kr[c + 1], kr[c + 2], kr[c + 3], dqk, s + c);
      for (; c < n; ++c) s[c] = dot1<V>(q, kr[c], dqk);

      // scale, softcap, chunk max
      R mx = V::set1(neg_inf);
      const R sc = V::set1(scale);
      for (c = 0; c < n; c += W) {
        const int rem = std::min(W, n - c);
        R x = V::mul(V::loadn(s + c, rem), sc);
        if (cap > 0.f) x = V::mul(V::set1(cap), vtanh<V>(V::mul(x, V::set1(1.f / cap))));
        V::storen(s + c, x, rem);
        if (rem < W) {  // lanes past the chunk must not raise the max
          alignas(64) float buf[W];
          V::store(buf, x);
          for (int z = rem; z < W; ++z) buf[z] = neg_inf;
          x = V::load(buf);
        }
        mx = V::max(mx, x);
      }
      const float m_new = std::max(m[r], V::hmax(mx));
      const float alpha = m[r] == m_new ? 1.f : std::exp(m[r] - m_new);  // exp(-inf) = 0 at first
      l[r] *= alpha;
      m[r] = m_new;

      R sum = V::zero();
      const R mv = V::set1(m_new);
      for (c = 0; c < n; c += W) {
        const int rem = std::min(W, n - c);
        R e = V::exp(V::sub(V::loadn(s + c, rem), mv));
        V::storen(s + c, e, rem);
        if (rem < W) {
          alignas(64) float buf[W];
          V::store(buf, e);
          for (int z = rem; z < W; ++z) buf[z] = 0.f;
          e = V::load(buf);
        }
        sum = V::add(sum, e);
      }
      l[r] += V::hsum(sum);

      float al = alpha;  // the rescale of the accumulator rides on the first update
      for (c = 0; c + 4 <= n; c += 4) {
        axpy_rows<V, 4>(out, al, s + c, vr + c, dv);
        al = 1.f;
      }
      for (; c < n; ++c) {
        axpy_rows<V, 1>(out, al, s + c, vr + c, dv);
        al = 1.f;
      }
    }
  }
}

// o[0, n) *= f
template <Isa I>
void scale_row_impl(float* o, int64_t n, float f) {
  using V = Vec<I>;
  constexpr int W = V::W;
  const typename V::R fv = V::set1(f);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(o + i, V::mul(V::load(o + i), fv));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V::storen(o + i, V::mul(V::loadn(o + i, r), fv), r);
  }
}

template <Isa I>
constexpr AttentionKernels make_attention_kernels() {
  return {&attend_group_impl<I>, &scale_row_impl<I>};
}

}  // namespace
}  // namespace fuselm::kernels
