// Attention body over Vec<Isa> (internal; included like norm_impl.h: it brings simd_math.h).
//
// Per (token, KV group, key range): keys in chunks of 64. A group of at most 8 q heads whose sizes
// are multiples of 2·W (decode of GQA models: a few heads per K/V row) takes attend_group_pairs:
// per chunk the logits key by key, each K row loaded once for all heads, then one p·V pass for all
// heads per V load; the next chunk's rows are prefetched. Otherwise per chunk: the logits of every
// q head of the group from K blocks transposed in registers (for heads wider than 256, dot
// products, four heads per K load), then
// per head softcap, one online-softmax rescale, exponentials, and acc += p·V (the accumulator row
// in registers over the chunk, in slabs of 4 vectors). Prefill blocks of tokens (attend_block_impl)
// transpose each chunk's K and widen its bf16/q8_0 V rows once for all their tokens and heads.
//
// attention.cc includes it for the generic table; CMake writes the avx2 and avx512 tables from the
// line below (build/isa/attention_<isa>.cc from isa_table.cc.in).
// isa-table: AttentionKernels make_attention_kernels avx2 avx512
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/simd_math.h"
namespace fuselm::kernels {
namespace {  // NOLINT

// A q8_0 cache row of one head (AttentionArgs::cache_q8_0): ggml's block_q8_0 blocks (fp16 scale,
// 32 int8) from `blk`, at element `off` of the head. Kernels index it as a pointer (row + d). A
// load of W values (W divides 32, loads start at multiples of W) stays inside one block and is
// that block's int8 values times its scale: the block is never widened as a whole. The head is
// padded with zero values to whole blocks, so a tail load may read all W lanes.
struct Q8Row {
  const uint8_t* blk;
  int64_t off;
  Q8Row operator+(int64_t n) const { return {blk, off + n}; }
};

// Row pointers of a cache of element type T: const T* for f32 and bf16, Q8Row for q8_0.
template <class T>
using RowPtr = std::conditional_t<std::is_same_v<T, Q8Row>, Q8Row, const T*>;

// Head `kvh` (head size `head`) of the row of `slot`; `stride`: floats (bf16 values; q8_0:
// blocks) between slots' rows.
template <class T>
FUSELM_INLINE RowPtr<T> cache_row(const void* cache, int64_t slot, int64_t stride, int64_t kvh, int64_t head) {
  if constexpr (std::is_same_v<T, Q8Row>) {
    constexpr int64_t kBlockBytes = 34, kBlock = 32;
    const int64_t block = slot * stride + kvh * ((head + kBlock - 1) / kBlock);
    return {static_cast<const uint8_t*>(cache) + block * kBlockBytes, 0};
  } else {
    return static_cast<const T*>(cache) + slot * stride + kvh * head;
  }
}

// The `head` values of a cache row (cache_row), prefetched into L2: a chunk's rows lie in blocks
// scattered by the block table, which the hardware prefetchers cannot follow.
template <class T>
FUSELM_INLINE void prefetch_row(RowPtr<T> row, int64_t head) {
  const char* p;
  int64_t bytes;
  if constexpr (std::is_same_v<T, Q8Row>) {
    p = reinterpret_cast<const char*>(row.blk);
    bytes = (head + 31) / 32 * 34;
  } else {
    p = reinterpret_cast<const char*>(row);
    bytes = head * static_cast<int64_t>(sizeof(T));
  }
  for (int64_t b = 0; b < bytes; b += 64) FUSELM_PREFETCH_L2(p + b);
  FUSELM_PREFETCH_L2(p + bytes - 1);  // the last line, where the row does not start on one
}

// Cache rows as fp32 vectors: an f32 cache loads them, a bf16 cache widens them, a q8_0 cache
// scales the int8 values of the block it reads.
FUSELM_INLINE float q8_scale(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, sizeof d);
#if defined(FUSELM_ISA_HAS_F16C)
  return _cvtsh_ss(d);  // one instruction, where the path has F16C
#else
  return f16_to_f32(d);
#endif
}
template <class V>
FUSELM_INLINE typename V::R ld(Q8Row p) {
  const uint8_t* b = p.blk + (p.off >> 5) * 34;
  return V::mul(V::load_i8(reinterpret_cast<const int8_t*>(b + 2) + (p.off & 31)), V::set1(q8_scale(b)));
}
template <class V>
FUSELM_INLINE typename V::R ldn(Q8Row p, int) { return ld<V>(p); }  // (the padding is zero)
template <class V>
FUSELM_INLINE typename V::R ld(const float* p) { return V::load(p); }
template <class V>
FUSELM_INLINE typename V::R ld(const uint16_t* p) { return V::load_bf16(p); }
template <class V>
FUSELM_INLINE typename V::R ldn(const float* p, int n) { return V::loadn(p, n); }
template <class V>
FUSELM_INLINE typename V::R ldn(const uint16_t* p, int n) { return V::loadn_bf16(p, n); }

template <class V, class P>
FUSELM_INLINE void dot4(const float* q, P k0, P k1, P k2, P k3, int64_t d, float* s) {
  using R = typename V::R;
  constexpr int W = V::W;
  R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    const R qv = V::load(q + i);
    a0 = V::fma(qv, ld<V>(k0 + i), a0);
    a1 = V::fma(qv, ld<V>(k1 + i), a1);
    a2 = V::fma(qv, ld<V>(k2 + i), a2);
    a3 = V::fma(qv, ld<V>(k3 + i), a3);
  }
  if (i < d) {
    const int r = static_cast<int>(d - i);
    const R qv = V::loadn(q + i, r);
    a0 = V::fma(qv, ldn<V>(k0 + i, r), a0);
    a1 = V::fma(qv, ldn<V>(k1 + i, r), a1);
    a2 = V::fma(qv, ldn<V>(k2 + i, r), a2);
    a3 = V::fma(qv, ldn<V>(k3 + i, r), a3);
  }
  s[0] = V::hsum(a0);
  s[1] = V::hsum(a1);
  s[2] = V::hsum(a2);
  s[3] = V::hsum(a3);
}

template <class V, class P>
FUSELM_INLINE float dot1(const float* q, P k, int64_t d) {
  using R = typename V::R;
  constexpr int W = V::W;
  R a = V::zero();
  int64_t i = 0;
  for (; i + W <= d; i += W) a = V::fma(V::load(q + i), ld<V>(k + i), a);
  if (i < d) {
    const int r = static_cast<int>(d - i);
    a = V::fma(V::loadn(q + i, r), ldn<V>(k + i, r), a);
  }
  return V::hsum(a);
}

// s[r·stride] = q_r · k for four q rows and one key: each K vector is loaded (widened, scaled)
// once for the four heads, which matters for bf16 and q8_0 rows of wide heads (MLA's latent).
template <class V, class P>
FUSELM_INLINE void dot_q4(const float* const* q, P k, int64_t d, float* s, int stride) {
  using R = typename V::R;
  constexpr int W = V::W;
  R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t i = 0;
  for (; i + W <= d; i += W) {
    const R kv = ld<V>(k + i);
    a0 = V::fma(V::load(q[0] + i), kv, a0);
    a1 = V::fma(V::load(q[1] + i), kv, a1);
    a2 = V::fma(V::load(q[2] + i), kv, a2);
    a3 = V::fma(V::load(q[3] + i), kv, a3);
  }
  if (i < d) {
    const int r = static_cast<int>(d - i);
    const R kv = ldn<V>(k + i, r);
    a0 = V::fma(V::loadn(q[0] + i, r), kv, a0);
    a1 = V::fma(V::loadn(q[1] + i, r), kv, a1);
    a2 = V::fma(V::loadn(q[2] + i, r), kv, a2);
    a3 = V::fma(V::loadn(q[3] + i, r), kv, a3);
  }
  s[0] = V::hsum(a0);
  s[stride] = V::hsum(a1);
  s[2 * stride] = V::hsum(a2);
  s[3 * stride] = V::hsum(a3);
}

// o[0, d) = o · alpha + sum_{c < n} p[c] · v_c[0, d). Slabs of 4 vectors of o stay in registers
// over all n rows, with even and odd rows in separate accumulators (8 independent FMA chains).
template <class V, class P>
FUSELM_INLINE void pv_accumulate(float* o, float alpha, const float* p, const P* v, int n, int64_t d) {
  using R = typename V::R;
  constexpr int W = V::W;
  const R al = V::set1(alpha);
  int64_t d0 = 0;
  for (; d0 + 4 * W <= d; d0 += 4 * W) {
    R e[4], f[4];
    FUSELM_UNROLL(4)
    for (int u = 0; u < 4; ++u) {
      e[u] = V::mul(V::load(o + d0 + u * W), al);
      f[u] = V::zero();
    }
    int c = 0;
    for (; c + 2 <= n; c += 2) {
      const R p0 = V::set1(p[c]), p1 = V::set1(p[c + 1]);
      const P v0 = v[c] + d0;
      const P v1 = v[c + 1] + d0;
      FUSELM_UNROLL(4)
      for (int u = 0; u < 4; ++u) {
        e[u] = V::fma(p0, ld<V>(v0 + u * W), e[u]);
        f[u] = V::fma(p1, ld<V>(v1 + u * W), f[u]);
      }
    }
    if (c < n) {
      const R p0 = V::set1(p[c]);
      FUSELM_UNROLL(4)
      for (int u = 0; u < 4; ++u) e[u] = V::fma(p0, ld<V>(v[c] + d0 + u * W), e[u]);
    }
    FUSELM_UNROLL(4)
    for (int u = 0; u < 4; ++u) V::store(o + d0 + u * W, V::add(e[u], f[u]));
  }
  for (; d0 < d; d0 += W) {  // the last < 4 vectors
    const int r = static_cast<int>(std::min<int64_t>(W, d - d0));
    R e = V::mul(V::loadn(o + d0, r), al), f = V::zero();
    int c = 0;
    for (; c + 2 <= n; c += 2) {
      e = V::fma(V::set1(p[c]), ldn<V>(v[c] + d0, r), e);
      f = V::fma(V::set1(p[c + 1]), ldn<V>(v[c + 1] + d0, r), f);
    }
    if (c < n) e = V::fma(V::set1(p[c]), ldn<V>(v[c] + d0, r), e);
    V::storen(o + d0, V::add(e, f), r);
  }
}

// K rows kr[0, n) of a chunk transposed into kt[d * CH + c] (d < dqk <= kMaxD; columns n..
// rounded up to W are zero), W keys at a time in registers.
template <class V, int CH, class P>
FUSELM_INLINE void transpose_chunk(const P* kr, int n, int64_t dqk, float* kt) {
  using R = typename V::R;
  constexpr int W = V::W;
  for (int c0 = 0; c0 < n; c0 += W) {
    const int nk = std::min(W, n - c0);
    for (int64_t d0 = 0; d0 < dqk; d0 += W) {
      const int dn = static_cast<int>(std::min<int64_t>(W, dqk - d0));
      R t[W];
      FUSELM_UNROLL(16)
      for (int i = 0; i < W; ++i)
        t[i] = i >= nk ? V::zero() : dn == W ? ld<V>(kr[c0 + i] + d0) : ldn<V>(kr[c0 + i] + d0, dn);
      V::transpose(t);
      for (int dd = 0; dd < dn; ++dd) V::store(kt + (d0 + dd) * CH + c0, t[dd]);
    }
  }
}

// Logits of W keys, columns [c, c + W) of a transposed chunk kt[d * CH + c], for one q row:
// Σ_d q[d]·kt[d] with q[d] broadcast (no horizontal sums), in four chains.
template <class V, int CH>
FUSELM_INLINE typename V::R transposed_logits(const float* q, const float* kt, int c, int64_t dqk) {
  typename V::R acc0 = V::zero(), acc1 = V::zero(), acc2 = V::zero(), acc3 = V::zero();
  int64_t d = 0;
  for (; d + 4 <= dqk; d += 4) {
    acc0 = V::fma(V::set1(q[d]), V::load(kt + d * CH + c), acc0);
    acc1 = V::fma(V::set1(q[d + 1]), V::load(kt + (d + 1) * CH + c), acc1);
    acc2 = V::fma(V::set1(q[d + 2]), V::load(kt + (d + 2) * CH + c), acc2);
    acc3 = V::fma(V::set1(q[d + 3]), V::load(kt + (d + 3) * CH + c), acc3);
  }
  for (; d < dqk; ++d) acc0 = V::fma(V::set1(q[d]), V::load(kt + d * CH + c), acc0);
  return V::add(V::add(acc0, acc1), V::add(acc2, acc3));
}

// Logits of 8 vectors of keys, columns [c, c + 8·W) of a transposed chunk, for one q row: each
// q[d] broadcast once for all 8 (transposed_logits broadcasts it per vector), 8 chains over d.
template <class V, int CH>
FUSELM_INLINE void transposed_logits8(const float* q, const float* kt, int c, int64_t dqk, float* s) {
  using R = typename V::R;
  constexpr int W = V::W;
  R acc[8];
  FUSELM_UNROLL(8)
  for (int u = 0; u < 8; ++u) acc[u] = V::zero();
  for (int64_t d = 0; d < dqk; ++d) {
    const R qb = V::set1(q[d]);
    FUSELM_UNROLL(8)
    for (int u = 0; u < 8; ++u) acc[u] = V::fma(qb, V::load(kt + d * CH + c + u * W), acc[u]);
  }
  FUSELM_UNROLL(8)
  for (int u = 0; u < 8; ++u) V::store(s + c + u * W, acc[u]);
}

// Logits of one chunk for the q heads [h0, h0 + nh): s[r*CH + c] = q_r · k_c (unscaled). The
// chunk's keys are transposed once (transpose_chunk) and serve every head of the group.
template <class V, int CH, int kMaxD, class P>
FUSELM_INLINE void chunk_logits(const AttentionArgs& a, int64_t ti, int64_t h0, int64_t nh,
                                const P* kr, int n, float* s) {
  constexpr int W = V::W;
  const int64_t dqk = a.dqk;
  if (dqk > kMaxD) {  // very wide heads: plain dot products, four heads per K load
    auto q_of = [&](int64_t r) { return a.q + ti * a.q_token_stride + (h0 + r) * a.q_head_stride; };
    int64_t r = 0;
    for (; r + 4 <= nh; r += 4) {
      const float* q4[4] = {q_of(r), q_of(r + 1), q_of(r + 2), q_of(r + 3)};
      for (int c = 0; c < n; ++c) dot_q4<V>(q4, kr[c], dqk, s + r * CH + c, CH);
    }
    for (; r < nh; ++r) {
      const float* q = q_of(r);
      int c = 0;
      for (; c + 4 <= n; c += 4) dot4<V>(q, kr[c], kr[c + 1], kr[c + 2], kr[c + 3], dqk, s + r * CH + c);
      for (; c < n; ++c) s[r * CH + c] = dot1<V>(q, kr[c], dqk);
    }
    return;
  }
  alignas(64) float kt[kMaxD * CH];
  transpose_chunk<V, CH>(kr, n, dqk, kt);
  for (int c0 = 0; c0 < n; c0 += W) {
    const int nk = std::min(W, n - c0);
    for (int64_t r = 0; r < nh; ++r) {
      const float* q = a.q + ti * a.q_token_stride + (h0 + r) * a.q_head_stride;
      V::storen(s + r * CH + c0, transposed_logits<V, CH>(q, kt, c0, dqk), nk);
    }
  }
}

// One head h over n keys of a chunk: s[0, n) its unscaled logits (overwritten with exp), dist
// the keys' ALiBi distances (or null); scale, softcap and ALiBi, then the online softmax update
// of (m, l). Returns the factor by which the head's accumulated p·V must be rescaled.
template <Isa I>
FUSELM_INLINE float softmax_chunk(const AttentionArgs& a, int64_t h, float* s, const float* dist, int n, float& m,
                                  float& l) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const float scale = a.scale, cap = a.softcap;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // scale, softcap, ALiBi bias, chunk max
  R mx = V::set1(neg_inf);
  const R sc = V::set1(scale);
  int c = 0;
  for (; c < n; c += W) {
    const int rem = std::min(W, n - c);
    R x = V::mul(V::loadn(s + c, rem), sc);
    if (cap > 0.f) x = V::mul(V::set1(cap), vtanh<V>(V::mul(x, V::set1(1.f / cap))));
    if (dist) x = V::fma(V::set1(a.alibi_slopes[h]), V::loadn(dist + c, rem), x);
    V::storen(s + c, x, rem);
    if (rem < W) {  // lanes past the chunk must not raise the max
      alignas(64) float buf[W];
      V::store(buf, x);
      for (int z = rem; z < W; ++z) buf[z] = neg_inf;
      x = V::load(buf);
    }
    mx = V::max(mx, x);
  }
  const float m_new = std::max(m, V::hmax(mx));
  const float alpha = m == m_new ? 1.f : std::exp(m - m_new);  // exp(-inf) = 0 at first
  l *= alpha;
  m = m_new;

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
  l += V::hsum(sum);
  return alpha;
}

// softmax_chunk, then out = out·alpha + p·V over the chunk's V rows vr.
template <Isa I, class P>
FUSELM_INLINE void softmax_pv(const AttentionArgs& a, int64_t h, float* s, const float* dist, const P* vr,
                              int n, float* out, float& m, float& l) {
  const float alpha = softmax_chunk<I>(a, h, s, dist, n, m, l);
  pv_accumulate<Vec<I>>(out, alpha, s, vr, n, a.dv);
}

// ---------------------------------------------------------------- decode for small head groups

// Two vectors (2·W values) of a cache row from element d (a multiple of 2·W) in pair order: a
// bf16 row split into its even and odd elements (one load and two bit operations, no widening
// shuffle), f32 and q8_0 rows in memory order. Dot products and p·V sums do not depend on the
// order of the elements as long as q and the accumulated output use the same one (pair_order).
template <class V, class P>
FUSELM_INLINE void ld_pair(P row, typename V::R& a, typename V::R& b) {
  if constexpr (std::is_same_v<P, const uint16_t*>) {
    V::load_bf16_pairs(row, a, b);
  } else {
    a = ld<V>(row);
    b = ld<V>(row + V::W);
  }
}

// n floats (n a multiple of 2·W) from memory order into ld_pair's order (back = false), or back.
template <class V, class P>
FUSELM_INLINE void pair_order(const float* src, float* dst, int64_t n, bool back) {
  constexpr int W = V::W;
  if constexpr (!std::is_same_v<P, const uint16_t*>) {
    std::copy(src, src + n, dst);
  } else {
    for (int64_t b = 0; b < n; b += 2 * W)
      for (int e = 0; e < W; ++e) {
        if (back) {
          dst[b + 2 * e] = src[b + e];
          dst[b + 2 * e + 1] = src[b + W + e];
        } else {
          dst[b + e] = src[b + 2 * e];
          dst[b + W + e] = src[b + 2 * e + 1];
        }
      }
  }
}

// Logits of the NH heads for keys [c0, c0 + nk) (nk <= W) of a chunk: each K row is loaded once
// (ld_pair) for all heads, each head's products summed into one vector per key, and W keys'
// vectors reduced so that one vector holds W logits (V::sum_rows, no horizontal sum per key). With
// 32 vector registers two keys go together, so each q vector loaded serves both. (One function:
// the same loops split into a helper per pass ran 12-20 % slower on Zen 4 with GCC.)
template <class V, int NH, class P>
FUSELM_INLINE void pair_logits(const float* qp, int64_t dqk, const P* kr, int nk, float* s, int stride) {
  using R = typename V::R;
  constexpr int W = V::W;
  // keys per pass: where their accumulators, K and q vectors fit (a q8_0 row's scaling needs more)
  constexpr int KB = (V::W >= 16 && 2 * NH + 6 <= 32 && !std::is_same_v<P, Q8Row>) ? 2 : 1;
  alignas(64) float lanes[NH][W][W];
  for (int i = 0; i < nk; i += KB) {
    const int kb = std::min(KB, nk - i);
    R acc[KB][NH];
    FUSELM_UNROLL(8)
    for (int r = 0; r < NH; ++r)
      for (int b = 0; b < KB; ++b) acc[b][r] = V::zero();
    for (int64_t d = 0; d < dqk; d += 2 * W) {
      R ka[KB], kb_[KB];
      for (int b = 0; b < KB; ++b) ld_pair<V>(kr[i + (b < kb ? b : 0)] + d, ka[b], kb_[b]);
      FUSELM_UNROLL(8)
      for (int r = 0; r < NH; ++r) {
        const R qa = V::load(qp + r * dqk + d), qb = V::load(qp + r * dqk + d + W);
        for (int b = 0; b < KB; ++b) acc[b][r] = V::fma(kb_[b], qb, V::fma(ka[b], qa, acc[b][r]));
      }
    }
    FUSELM_UNROLL(8)
    for (int r = 0; r < NH; ++r)
      for (int b = 0; b < kb; ++b) V::store(lanes[r][i + b], acc[b][r]);
  }
  FUSELM_UNROLL(8)
  for (int r = 0; r < NH; ++r) {
    R t[W];
    FUSELM_UNROLL(16)
    for (int i = 0; i < W; ++i) t[i] = i < nk ? V::load(lanes[r][i]) : V::zero();
    V::storen(s + r * stride, V::sum_rows(t), nk);
  }
}

// op[r] = op[r]·alpha[r] + Σ_c p[r][c]·v_c for NH heads (op in pair order, rows dv apart; p rows
// CH apart): each V row is loaded once per 2·W slab for all NH heads.
template <class V, int NH, int CH, class P>
FUSELM_INLINE void pair_pv(float* op, int64_t dv, const float* alpha, const float* p, const P* vr, int n) {
  using R = typename V::R;
  constexpr int W = V::W;
  for (int64_t d = 0; d < dv; d += 2 * W) {
    R ea[NH], eb[NH];
    FUSELM_UNROLL(8)
    for (int r = 0; r < NH; ++r) {
      const R al = V::set1(alpha[r]);
      ea[r] = V::mul(V::load(op + r * dv + d), al);
      eb[r] = V::mul(V::load(op + r * dv + d + W), al);
    }
    for (int c = 0; c < n; ++c) {
      R va, vb;
      ld_pair<V>(vr[c] + d, va, vb);
      FUSELM_UNROLL(8)
      for (int r = 0; r < NH; ++r) {
        const R pr = V::set1(p[r * CH + c]);
        ea[r] = V::fma(pr, va, ea[r]);
        eb[r] = V::fma(pr, vb, eb[r]);
      }
    }
    FUSELM_UNROLL(8)
    for (int r = 0; r < NH; ++r) {
      V::store(op + r * dv + d, ea[r]);
      V::store(op + r * dv + d + W, eb[r]);
    }
  }
}

// The widest head dimension and group of attend_group_pairs.
inline constexpr int64_t kPairMaxD = 256;
inline constexpr int kPairMaxHeads = 8;

// Whether attend_group_pairs takes nh heads of these sizes.
template <Isa I>
FUSELM_INLINE bool pairs_fit(const AttentionArgs& a, int64_t nh) {
  constexpr int64_t W2 = 2 * Vec<I>::W;
  return nh >= 1 && nh <= kPairMaxHeads && a.dqk % W2 == 0 && a.dv % W2 == 0 && a.dqk <= kPairMaxD &&
         a.dv <= kPairMaxD;
}

// attend_group_impl for a group of NH <= 8 heads whose sizes are multiples of 2·W (pairs_fit): the
// logits key by key (pair_logits) instead of through a transposed K chunk, and p·V for all heads
// per V load (pair_pv). A decoded token of a small GQA group does a few heads' work per K/V row,
// so the transpose and per-head V widening cost more than the products (bf16, 3 heads of 64:
// 40 ns per key and group on Zen 3 with the transpose).
template <Isa I, class T, int NH>
void attend_group_pairs(const AttentionArgs& a, int64_t ti, int64_t h0, int64_t lo, int64_t hi, float* const* o,
                        float* m, float* l) {
  using V = Vec<I>;
  using P = RowPtr<T>;
  constexpr int W = V::W, CH = 64;
  // Heads per pair_pv pass: 2·G accumulators stay in registers. 8 with AVX-512's 32 registers
  // where a V row costs most to load (q8_0: scaled int8), else 4 (bf16 and f32 ran slower with 8).
  constexpr int kPass = W >= 16 && std::is_same_v<P, Q8Row> ? 8 : 4;
  constexpr int G = NH < kPass ? NH : kPass;
  const int64_t dqk = a.dqk, dv = a.dv, kvh = h0 / (a.hq / a.hkv);
  alignas(64) float qp[NH * kPairMaxD];
  alignas(64) float op[NH * kPairMaxD];
  alignas(64) float s[NH * CH];
  alignas(64) float dist[CH];
  float alpha[NH];
  P kr[CH], vr[CH];
  for (int r = 0; r < NH; ++r) {
    pair_order<V, P>(a.q + ti * a.q_token_stride + (h0 + r) * a.q_head_stride, qp + r * dqk, dqk, false);
    pair_order<V, P>(o[r], op + r * dv, dv, false);
  }
  for (int64_t j0 = lo; j0 < hi; j0 += CH) {
    const int n = static_cast<int>(std::min<int64_t>(CH, hi - j0));
    for (int c = 0; c < n; ++c) {
      kr[c] = cache_row<T>(a.k_cache, a.slots[j0 + c], a.k_row_stride, kvh, dqk);
      vr[c] = cache_row<T>(a.v_cache, a.slots[j0 + c], a.v_row_stride, kvh, dv);
    }
    // The next chunk's rows, while this one computes: W keys' rows per W keys' logits, so that the
    // misses are spread over the chunk instead of one burst at its start.
    const int64_t next_end = std::min(j0 + 2 * CH, hi);
    for (int c0 = 0; c0 < n; c0 += W) {
      for (int64_t c = j0 + CH + c0; c < std::min<int64_t>(j0 + CH + c0 + W, next_end); ++c) {
        prefetch_row<T>(cache_row<T>(a.k_cache, a.slots[c], a.k_row_stride, kvh, dqk), dqk);
        prefetch_row<T>(cache_row<T>(a.v_cache, a.slots[c], a.v_row_stride, kvh, dv), dv);
      }
      pair_logits<V, NH>(qp, dqk, kr + c0, std::min(W, n - c0), s + c0, CH);
    }
    if (a.alibi_slopes)
      for (int c = 0; c < n; ++c) dist[c] = static_cast<float>(j0 + c - (a.ctx_len - a.t + ti));
    for (int r = 0; r < NH; ++r)
      alpha[r] = softmax_chunk<I>(a, h0 + r, s + r * CH, a.alibi_slopes ? dist : nullptr, n, m[r], l[r]);
    pair_pv<V, G, CH>(op, dv, alpha, s, vr, n);
    if constexpr (NH > G) pair_pv<V, NH - G, CH>(op + G * dv, dv, alpha + G, s + G * CH, vr, n);
  }
  for (int r = 0; r < NH; ++r) pair_order<V, P>(op + r * dv, o[r], dv, true);
}

// The q heads [h0, h0 + nh) (nh <= 64) of one KV group, new token ti, against context keys
// [lo, hi): per head r, o[r] (dv floats) accumulates unnormalised p·V with running max m[r] and
// sum l[r] (set by the caller: -inf/0, or the sink). Keys go in chunks of 64; a chunk's K and V
// rows are read from memory once and then serve every head of the group from L1.
// T: the cache's element type (float, uint16_t for bf16 rows, Q8Row for q8_0 rows).
template <Isa I, class T>
void attend_group_impl(const AttentionArgs& a, int64_t ti, int64_t h0, int64_t nh, int64_t lo,
                       int64_t hi, float* const* o, float* m, float* l) {
  using V = Vec<I>;
  constexpr int CH = 64;
  alignas(64) float s_all[64 * CH];
  RowPtr<T> kr[CH];
  RowPtr<T> vr[CH];

  if (pairs_fit<I>(a, nh)) {
    switch (nh) {
      case 1: return attend_group_pairs<I, T, 1>(a, ti, h0, lo, hi, o, m, l);
      case 2: return attend_group_pairs<I, T, 2>(a, ti, h0, lo, hi, o, m, l);
      case 3: return attend_group_pairs<I, T, 3>(a, ti, h0, lo, hi, o, m, l);
      case 4: return attend_group_pairs<I, T, 4>(a, ti, h0, lo, hi, o, m, l);
      case 5: return attend_group_pairs<I, T, 5>(a, ti, h0, lo, hi, o, m, l);
      case 6: return attend_group_pairs<I, T, 6>(a, ti, h0, lo, hi, o, m, l);
      case 7: return attend_group_pairs<I, T, 7>(a, ti, h0, lo, hi, o, m, l);
      default: return attend_group_pairs<I, T, 8>(a, ti, h0, lo, hi, o, m, l);
    }
  }
  const int64_t kvh = h0 / (a.hq / a.hkv);
  const int64_t k_row = a.k_row_stride, v_row = a.v_row_stride;

  for (int64_t j0 = lo; j0 < hi; j0 += CH) {
    const int n = static_cast<int>(std::min<int64_t>(CH, hi - j0));
    for (int c = 0; c < n; ++c) {
      kr[c] = cache_row<T>(a.k_cache, a.slots[j0 + c], k_row, kvh, a.dqk);
      vr[c] = cache_row<T>(a.v_cache, a.slots[j0 + c], v_row, kvh, a.dv);
    }
    chunk_logits<V, CH, 256>(a, ti, h0, nh, kr, n, s_all);
    // ALiBi: key distance j - p of each key of the chunk (p: the query's position), shared by heads.
    alignas(64) float dist[CH];
    if (a.alibi_slopes)
      for (int c = 0; c < n; ++c) dist[c] = static_cast<float>(j0 + c - (a.ctx_len - a.t + ti));
    for (int64_t r = 0; r < nh; ++r)
      softmax_pv<I>(a, h0 + r, s_all + r * CH, a.alibi_slopes ? dist : nullptr, vr, n, o[r], m[r], l[r]);
  }
}

// New tokens [i0, i0 + nb) (prefill), q heads [h0, h0 + nh) of one KV group; token b sees the
// keys [lo[b], hi[b]). As attend_group_impl per token (o[b * nh + r], m and l alike, initialised
// by the caller), but each 64-key chunk of the tokens' key union is transposed once and serves
// all nb tokens: per token only the logits, the softmax and p·V remain (per-token transposes
// took 22 % of prefill attention's perf samples on SmolLM2).
template <Isa I, class T>
void attend_block_impl(const AttentionArgs& a, int64_t i0, int64_t nb, int64_t h0, int64_t nh, const int64_t* lo,
                       const int64_t* hi, float* const* o, float* m, float* l) {
  using V = Vec<I>;
  constexpr int W = V::W;
  constexpr int CH = 64;
  constexpr int64_t kMaxD = 256;
  if (a.dqk > kMaxD) {  // very wide heads: per token, plain dot products
    for (int64_t b = 0; b < nb; ++b)
      attend_group_impl<I, T>(a, i0 + b, h0, nh, lo[b], hi[b], o + b * nh, m + b * nh, l + b * nh);
    return;
  }
  alignas(64) float kt[kMaxD * CH];
  alignas(64) float s_all[64 * CH];
  alignas(64) float dist[CH];
  RowPtr<T> kr[CH];
  RowPtr<T> vr[CH];
  // bf16 and q8_0 V rows widened once per chunk (as K is transposed once): every (token, head)
  // of the block then reads fp32 rows instead of widening each row again
  constexpr bool kWidenV = !std::is_same_v<T, float>;
  alignas(64) float vf[kWidenV ? kMaxD * CH : 1];
  const float* vfr[CH];
  const bool widen_v = kWidenV && a.dv <= kMaxD && a.dv % W == 0;
  const int64_t kvh = h0 / (a.hq / a.hkv), dqk = a.dqk, dv = a.dv;
  const int64_t lo_all = *std::min_element(lo, lo + nb), hi_all = *std::max_element(hi, hi + nb);

  for (int64_t j0 = lo_all; j0 < hi_all; j0 += CH) {
    const int n = static_cast<int>(std::min<int64_t>(CH, hi_all - j0));
    for (int c = 0; c < n; ++c) {
      kr[c] = cache_row<T>(a.k_cache, a.slots[j0 + c], a.k_row_stride, kvh, dqk);
      vr[c] = cache_row<T>(a.v_cache, a.slots[j0 + c], a.v_row_stride, kvh, dv);
    }
    transpose_chunk<V, CH>(kr, n, dqk, kt);
    if (widen_v)
      for (int c = 0; c < n; ++c) {
        float* row = vf + c * dv;
        for (int64_t d = 0; d < dv; d += W) V::store(row + d, ld<V>(vr[c] + d));
        vfr[c] = row;
      }
    for (int64_t b = 0; b < nb; ++b) {
      const int c0 = static_cast<int>(std::max(lo[b], j0) - j0), c1 = static_cast<int>(std::min<int64_t>(hi[b], j0 + n) - j0);
      if (c0 >= c1) continue;  // this token sees none of the chunk
      const int64_t ti = i0 + b;
      for (int64_t r = 0; r < nh; ++r) {
        const float* q = a.q + ti * a.q_token_stride + (h0 + r) * a.q_head_stride;
        int c = c0 / W * W;
        for (; c + 8 * W <= c1; c += 8 * W) transposed_logits8<V, CH>(q, kt, c, dqk, s_all + r * CH);
        for (; c < c1; c += W) V::storen(s_all + r * CH + c, transposed_logits<V, CH>(q, kt, c, dqk), std::min(W, c1 - c));
      }
      if (a.alibi_slopes)
        for (int c = c0; c < c1; ++c) dist[c] = static_cast<float>(j0 + c - (a.ctx_len - a.t + ti));
      for (int64_t r = 0; r < nh; ++r) {
        float* s_r = s_all + r * CH + c0;
        const float* dist_r = a.alibi_slopes ? dist + c0 : nullptr;
        float* o_r = o[b * nh + r];
        if (widen_v)
          softmax_pv<I>(a, h0 + r, s_r, dist_r, vfr + c0, c1 - c0, o_r, m[b * nh + r], l[b * nh + r]);
        else
          softmax_pv<I>(a, h0 + r, s_r, dist_r, vr + c0, c1 - c0, o_r, m[b * nh + r], l[b * nh + r]);
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
  return {&attend_group_impl<I, float>, &scale_row_impl<I>, &attend_group_impl<I, uint16_t>,
          &attend_block_impl<I, float>, &attend_block_impl<I, uint16_t>, &attend_group_impl<I, Q8Row>,
          &attend_block_impl<I, Q8Row>};
}

}  // namespace
}  // namespace fuselm::kernels
