// quant_linear's AVX2 and AVX-512 VNNI bodies (internal), on 256-bit vectors: one 32-element
// block (or K-quant chunk) of unsigned weight codes against 32 int8 activations per step.
// Included by quant_impl.h in the files CMake writes per level; the VNNI bodies where the level has
// AVX512_VNNI (FUSELM_ISA_HAS_AVX512VNNI); includes nothing itself (see the ODR rule in simd.h).
//
// u8×s8 dot of 32 bytes -> 8 int32 lanes: vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (AVX2; no
// saturation: codes are at most 128, activations at most 127 in magnitude). Q8_0's signed codes
// go through |w| and sign(x, w). Per block the int32 sums become fp32 and are scaled by
// d_w·d_x; offsets and minimums come from the activations' sums per 16. Each weight block is
// decoded once for up to 4 activation rows.
namespace fuselm::kernels {
namespace {  // NOLINT

FUSELM_INLINE __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if FUSELM_ISA_HAS_AVX512VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

FUSELM_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

FUSELM_INLINE float half(uint16_t v) { return _cvtsh_ss(v); }

FUSELM_INLINE __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of nibbles -> 32 codes: low nibbles (elements 0..15), then high nibbles (16..31).
FUSELM_INLINE __m256i unpack_nibbles16(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// q5_0 / q5_1's 5th bits: bit e of qh -> 0x10 in byte e (element e, in unpack_nibbles16's order).
FUSELM_INLINE __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
#if FUSELM_ISA_HAS_AVX512VNNI
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(bits), _mm256_set1_epi8(0x10));
#else
  // Byte e takes byte e/8 of qh, then tests its bit e%8 (ggml's bytes_from_bits_32).
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                          0x0101010101010101, 0x0000000000000000));
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), _mm256_set1_epi8(0x10));
#endif
}

// Activation rows i0 .. i0+R of a problem, as pointers.
struct ActRows {
  const int8_t* q;
  const float* d;
  const int16_t* s;
  const float* ds;
  int64_t q_stride, d_stride, s_stride, ds_stride;
};

// One 32-block step of Q8_0 into the accumulators acc[0..R).
template <int R>
FUSELM_INLINE void step_q8_0(const BlockQ8_0& w, int64_t b, const ActRows& a, __m256* acc) {
  const __m256i wv = load32(w.qs);
  const __m256i aw = _mm256_abs_epi8(wv);
  const float wd = half(w.d);
  FUSELM_UNROLL(4)
  for (int r = 0; r < R; ++r) {
    const __m256i xv = load32(a.q + r * a.q_stride + b * kQK);
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xv, wv));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * a.d[r * a.d_stride + b]), acc[r]);
  }
}

// One 32-block step of Q4_0 (Σ d_w·d_x·(q·x - 8·Σx)) or Q4_1 (Σ d_w·d_x·q·x + m_w·d_x·Σx), and
// of Q5_0 / Q5_1 likewise (the 5th bits or-ed in, offset 16).
template <int R, class B>
FUSELM_INLINE void step_q4(const B& w, int64_t b, const ActRows& a, __m256* acc, float* corr) {
  constexpr bool five = sizeof(B) == sizeof(BlockQ5_0) || sizeof(B) == sizeof(BlockQ5_1);
  __m256i q = unpack_nibbles16(w.qs);
  if constexpr (five) q = _mm256_or_si256(q, fifth_bits(w.qh));
  const float wd = half(w.d);
  float wc;  // weight of the activations' d·Σq: the -8 / -16 offset, or the minimum
  if constexpr (sizeof(B) == sizeof(BlockQ4_0))
    wc = -8.f * wd;
  else if constexpr (sizeof(B) == sizeof(BlockQ5_0))
    wc = -16.f * wd;
  else
    wc = half(w.m);
  FUSELM_UNROLL(4)
  for (int r = 0; r < R; ++r) {
    const __m256i xv = load32(a.q + r * a.q_stride + b * kQK);
    const __m256i p = dot_u8s8(_mm256_setzero_si256(), q, xv);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * a.d[r * a.d_stride + b]), acc[r]);
    corr[r] += wc * a.ds[r * a.ds_stride + b];
  }
}

// Blocks alternate between two sets of accumulators, so that even one row has two independent
// FMA chains (the chain's latency, not the loads, bounds a single dot product otherwise).
template <int R, class B>
FUSELM_INLINE void dot_32blocks(const B* w, int64_t nb, const ActRows& a, float* out) {
  __m256 acc[2][R];
  float corr[2][R];
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < R; ++r) acc[s][r] = _mm256_setzero_ps(), corr[s][r] = 0.f;
  auto step = [&](int64_t b, int s) {
    if constexpr (sizeof(B) == sizeof(BlockQ8_0))
      step_q8_0<R>(w[b], b, a, acc[s]);
    else
      step_q4<R>(w[b], b, a, acc[s], corr[s]);
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    step(b, 0);
    step(b + 1, 1);
  }
  if (b < nb) step(b, 0);
  for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_add_ps(acc[0][r], acc[1][r])) + corr[0][r] + corr[1][r];
}

// Eight 32-code chunks of a K-quant super-block and a scale per 16 codes (int16 pairs).
struct KChunks {
  __m256i q[8];
  __m256i scale[8];  // int16 lanes 0..7: scale of codes 0..15 of the chunk, lanes 8..15: 16..31
};

FUSELM_INLINE __m256i scale_pair(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

template <class B>
FUSELM_INLINE void decode_k45(const B& blk, KChunks& c, uint8_t (&mins)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (sizeof(B) == sizeof(BlockQ5_K)) qh = load32(blk.qh);
  for (int i = 0; i < 4; ++i) {
    const __m256i v = load32(blk.qs + 32 * i);
    c.q[2 * i] = _mm256_and_si256(v, m4);
    c.q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if constexpr (sizeof(B) == sizeof(BlockQ5_K)) {
      const __m256i one = _mm256_set1_epi8(1);
      const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), one);
      const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * i + 1), one);
      c.q[2 * i] = _mm256_or_si256(c.q[2 * i], _mm256_slli_epi16(b0, 4));
      c.q[2 * i + 1] = _mm256_or_si256(c.q[2 * i + 1], _mm256_slli_epi16(b1, 4));
    }
  }
  uint8_t sc[8];
  scales_mins_k4(blk.scales, sc, mins);
  for (int j = 0; j < 8; ++j) c.scale[j] = _mm256_set1_epi16(sc[j]);
}

FUSELM_INLINE void decode_q6_k(const BlockQ6_K& blk, KChunks& c) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  for (int n = 0; n < 2; ++n) {
    const __m256i l0 = load32(blk.ql + 64 * n), l1 = load32(blk.ql + 64 * n + 32);
    const __m256i qh = load32(blk.qh + 32 * n);
    const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                           _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
    for (int r = 0; r < 4; ++r) {
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * r), m2);
      c.q[4 * n + r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(hb, 4));
    }
  }
  for (int j = 0; j < 8; ++j) c.scale[j] = scale_pair(blk.scales[2 * j], blk.scales[2 * j + 1]);
}

// Σ_chunks scale·(codes·x) of one super-block against activation row x (256 int8).
FUSELM_INLINE __m256i k_sum(const KChunks& c, const int8_t* x) {
  __m256i acc = _mm256_setzero_si256();
  FUSELM_UNROLL(8)
  for (int j = 0; j < 8; ++j) {
    const __m256i p16 = _mm256_maddubs_epi16(c.q[j], load32(x + 32 * j));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, c.scale[j]));
  }
  return acc;
}

// One K-quant super-block decoded: its chunks, and what the activations' sums are weighted by
// (Q4_K/Q5_K: d, dmin and the 8 minimums; Q6_K: d and the 16 signed scales, offset 32).
struct KBlock {
  KChunks c;
  __m256i offs;  // int16 weights of the 16 activation sums per 16: Q6_K's scales, Q4_K/Q5_K's
                 // minimums each twice (one per half of its 32)
  float wd, wmin;
};

template <class B>
FUSELM_INLINE void decode_block(const B& w, KBlock& k) {
  if constexpr (sizeof(B) == sizeof(BlockQ6_K)) {
    decode_q6_k(w, k.c);
    k.wd = half(w.d), k.wmin = 0.f;
    k.offs = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
  } else {
    uint8_t mins[8];
    decode_k45(w, k.c, mins);
    k.wd = half(w.d), k.wmin = half(w.dmin);
    const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins));
    k.offs = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));  // m0 m0 m1 m1 ... m7 m7
  }
}

FUSELM_INLINE int hsum_i32x8(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
  return _mm_cvtsi128_si32(x);
}

// Super-block b of one row of a K-quant (kb, decoded) against activation rows r < R. The offset
// term Σ offs·(activation sums per 16) is exact in int32 (|sum| <= 16·127, |offs| <= 63), so one
// vpmaddwd and a horizontal add give what a scalar loop would.
template <int R, bool Q6>
FUSELM_INLINE void k_step(const KBlock& kb, int64_t b, const ActRows& a, __m256* acc, float* corr) {
  for (int r = 0; r < R; ++r) {
    const __m256i si = k_sum(kb.c, a.q + r * a.q_stride + b * kQKK);
    const float dx = a.d[r * a.d_stride + b];
    const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s + r * a.s_stride + 16 * b));
    const int offs = hsum_i32x8(_mm256_madd_epi16(kb.offs, s16));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(kb.wd * dx), acc[r]);
    if constexpr (Q6) corr[r] -= 32.f * kb.wd * dx * static_cast<float>(offs);
    else corr[r] -= kb.wmin * dx * static_cast<float>(offs);
  }
}

// A K-quant row against R activation rows, each super-block decoded as it comes (decode: the row
// meets at most 4 activation rows), or read decoded from `pre` (prefill: rows_simd decodes the row
// once for all of them). Same integer and fp32 operations either way.
template <int R, class B>
FUSELM_INLINE void dot_kquant(const B* w, const KBlock* pre, int64_t nb, const ActRows& a, float* out) {
  constexpr bool q6 = sizeof(B) == sizeof(BlockQ6_K);
  __m256 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = 0.f;
  KBlock kb;
  for (int64_t b = 0; b < nb; ++b) {
    if (pre) {
      k_step<R, q6>(pre[b], b, a, acc, corr);
    } else {
      decode_block(w[b], kb);
      k_step<R, q6>(kb, b, a, acc, corr);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + corr[r];
}

template <int R>
FUSELM_INLINE void dot_rows(const QuantProblem& p, const unsigned char* w, const ActRows& a, float* out) {
  const int64_t nb = p.k / quant_info(p.type).block_elems;
  switch (p.type) {
    case QuantType::q8_0: return dot_32blocks<R>(reinterpret_cast<const BlockQ8_0*>(w), nb, a, out);
    case QuantType::q4_0: return dot_32blocks<R>(reinterpret_cast<const BlockQ4_0*>(w), nb, a, out);
    case QuantType::q4_1: return dot_32blocks<R>(reinterpret_cast<const BlockQ4_1*>(w), nb, a, out);
    case QuantType::q4_k: return dot_kquant<R>(reinterpret_cast<const BlockQ4_K*>(w), nullptr, nb, a, out);
    case QuantType::q5_k: return dot_kquant<R>(reinterpret_cast<const BlockQ5_K*>(w), nullptr, nb, a, out);
    case QuantType::q6_k: return dot_kquant<R>(reinterpret_cast<const BlockQ6_K*>(w), nullptr, nb, a, out);
    case QuantType::q5_0: return dot_32blocks<R>(reinterpret_cast<const BlockQ5_0*>(w), nb, a, out);
    case QuantType::q5_1: return dot_32blocks<R>(reinterpret_cast<const BlockQ5_1*>(w), nb, a, out);
  }
}

// Weight rows outer, activation rows in groups of 4 inner: a weight row (at most a few KiB) stays
// in L1 while every activation row passes it.
template <class RowFn>
FUSELM_INLINE void each_row_group(const QuantProblem& p, const Q8Acts& q8, int64_t j, RowFn&& dot) {
  const int64_t nb = p.k / q8.block;
  const float bias = p.bias ? p.bias[j] : 0.f;
  for (int64_t i0 = 0; i0 < p.m; i0 += 4) {
    const ActRows a{q8.q + i0 * p.k, q8.d + i0 * nb, q8.sum16 + i0 * (p.k / 16), q8.dsum + i0 * (p.k / 32),
                    p.k, nb, p.k / 16, p.k / 32};
    float out[4];
    dot(p.m - i0 >= 4 ? 4 : static_cast<int>(p.m - i0), a, out);
    for (int64_t r = 0; r < 4 && i0 + r < p.m; ++r) p.y[(i0 + r) * p.ldy + j] = out[r] + bias;
  }
}

// A K-quant row meeting more than 4 activation rows (prefill) is decoded once into this thread's
// scratch (slot 2; 576 bytes per 256 weights, ~13 KiB at k = 5632) instead of once per group of 4:
// at m = 512 its unpacking had been redone 128 times. Kept out of rows_simd, whose inlined
// 32-block dots it would otherwise change.
template <class B>
[[gnu::noinline]] void rows_kquant_decoded(const QuantProblem& p, const Q8Acts& q8, int64_t n0, int64_t n1) {
  const int64_t nb = p.k / q8.block;
  KBlock* pre = reinterpret_cast<KBlock*>(thread_scratch(2, static_cast<size_t>(nb) * sizeof(KBlock) / sizeof(float) + 16));
  for (int64_t j = n0; j < n1; ++j) {
    const B* w = reinterpret_cast<const B*>(p.w + j * p.ldw);
    for (int64_t b = 0; b < nb; ++b) decode_block(w[b], pre[b]);
    each_row_group(p, q8, j, [&](int rows, const ActRows& a, float* out) {
      switch (rows) {
        case 4: return dot_kquant<4>(w, pre, nb, a, out);
        case 3: return dot_kquant<3>(w, pre, nb, a, out);
        case 2: return dot_kquant<2>(w, pre, nb, a, out);
        default: return dot_kquant<1>(w, pre, nb, a, out);
      }
    });
  }
}

void rows_simd(const QuantProblem& p, const Q8Acts& q8, int64_t n0, int64_t n1) {
  if (p.m > 4) {
    if (p.type == QuantType::q4_k) return rows_kquant_decoded<BlockQ4_K>(p, q8, n0, n1);
    if (p.type == QuantType::q5_k) return rows_kquant_decoded<BlockQ5_K>(p, q8, n0, n1);
    if (p.type == QuantType::q6_k) return rows_kquant_decoded<BlockQ6_K>(p, q8, n0, n1);
  }
  for (int64_t j = n0; j < n1; ++j) {
    const unsigned char* w = p.w + j * p.ldw;
    each_row_group(p, q8, j, [&](int rows, const ActRows& a, float* out) {
      switch (rows) {
        case 4: return dot_rows<4>(p, w, a, out);
        case 3: return dot_rows<3>(p, w, a, out);
        case 2: return dot_rows<2>(p, w, a, out);
        default: return dot_rows<1>(p, w, a, out);
      }
    });
  }
}

}  // namespace
}  // namespace fuselm::kernels

// ------------------------------------------------------------------------- packed (quant_packed.h)
namespace fuselm::kernels {
namespace {  // NOLINT

FUSELM_INLINE int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The packed kernels take the type as a template argument: its layout (quant_packed.h) decides
// at compile time how codes unpack and how a block is scaled. kCodeOffset<Q>: what the codes
// the dot product sees exceed the signed value by (q8_0: +128, its codes made unsigned).
template <QuantType Q>
inline constexpr int kCodeOffset = Q == QuantType::q8_0 ? 128 : packed_layout(Q).offset;

// Calls f.template operator()<Q>() for the packed type t (a switch over the packable types).
template <class F>
FUSELM_INLINE void with_packed_type(QuantType t, F&& f) {
  switch (t) {
    case QuantType::q8_0: return f.template operator()<QuantType::q8_0>();
    case QuantType::q4_0: return f.template operator()<QuantType::q4_0>();
    case QuantType::q4_1: return f.template operator()<QuantType::q4_1>();
    case QuantType::q5_0: return f.template operator()<QuantType::q5_0>();
    case QuantType::q5_1: return f.template operator()<QuantType::q5_1>();
    case QuantType::q4_k: return f.template operator()<QuantType::q4_k>();
    case QuantType::q5_k: return f.template operator()<QuantType::q5_k>();
    default: return f.template operator()<QuantType::q6_k>();
  }
}

#if FUSELM_ISA_HAS_AVX512VNNI
// The 16 rows' fp32 scales of block b: the f16 scales, or d·sc (k_scales; exact in fp32).
template <QuantType Q>
FUSELM_INLINE __m512 block_scales16(const QuantPacked& w, int64_t g, int64_t b) {
  if constexpr (packed_layout(Q).k_scales) {
    const __m128i sc = _mm_load_si128(reinterpret_cast<const __m128i*>(w.kscales(g, b)));
    return _mm512_mul_ps(_mm512_load_ps(w.ksuper(g, b / 8)), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
  } else {
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.scales(g, b))));
  }
}

// The 16 rows' fp32 minimums of block b (has_min): the f16 minimums, or -dmin·m.
template <QuantType Q>
FUSELM_INLINE __m512 block_mins16(const QuantPacked& w, int64_t g, int64_t b) {
  if constexpr (packed_layout(Q).k_scales) {
    const __m128i mn = _mm_load_si128(reinterpret_cast<const __m128i*>(w.kscales(g, b) + 16));
    return _mm512_mul_ps(_mm512_load_ps(w.ksuper(g, b / 8) + 16), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
  } else {
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.mins(g, b))));
  }
}

// q6_k: the 16 rows' fp32 scales of block b's elements 16h..16h+15, d·sc (exact in fp32).
FUSELM_INLINE __m512 block_scales16_half(const QuantPacked& w, int64_t g, int64_t b, int h) {
  const __m128i sc = _mm_load_si128(reinterpret_cast<const __m128i*>(w.scales16(g, b) + 16 * h));
  return _mm512_mul_ps(_mm512_load_ps(w.ksuper(g, b / 8)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
}

// Code vector q (0..3) of a nibble block: its low nibbles (k = 4q..4q+3 per lane) and high ones
// (k = 16+4q..), q5_*'s 5th bits (and q6_k's 6th) added with one masked add each.
template <QuantType Q>
FUSELM_INLINE void unpack_codes(const unsigned char* c, const uint64_t* bits, int q, __m512i& lo, __m512i& hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_load_si512(c + 64 * q);
  lo = _mm512_and_si512(v, m4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  if constexpr (packed_layout(Q).fifth_bit) {
    const __m512i b4 = _mm512_set1_epi8(0x10);
    lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(bits[q]), lo, b4);
    hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits[4 + q]), hi, b4);
  }
  if constexpr (packed_layout(Q).sixth_bit) {
    const __m512i b5 = _mm512_set1_epi8(0x20);
    lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(bits[8 + q]), lo, b5);
    hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bits[12 + q]), hi, b5);
  }
}

// Rows 16g..16g+15 against activation rows i0..i0+R: one vpdpbusd per 64 code bytes and row of
// x, two int32 chains per row (even / odd k-groups) to hide the instruction's latency. q8_0's
// signed codes are made unsigned (+128, an xor) and the 128·Σx this adds is taken back with the
// activations' d·Σx; q4_0's and q5_0's codes are unsigned already and -offset·Σx is their offset.
// q6_k (a scale per 16): the chains are the low nibbles (elements 0..15) and the high ones, each
// started at -32·Σx of its 16 (exact in int32) and scaled on its own.
template <QuantType Q, int R>
void packed_tile(const QuantPacked& w, int64_t g, const Q8Acts& a, int64_t i0, __m512* acc) {
  constexpr PackedLayout lay = packed_layout(Q);
  constexpr float off = kCodeOffset<Q>;
  const int64_t k = w.k(), nb = k / 32;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const unsigned char* c = w.codes(g, b);
    __m512i s0[R], s1[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (lay.scales16) {
        const int16_t* s16 = a.sum16 + (i0 + r) * (k / 16) + 2 * b;
        s0[r] = _mm512_set1_epi32(-lay.offset * s16[0]);
        s1[r] = _mm512_set1_epi32(-lay.offset * s16[1]);
      } else {
        s0[r] = s1[r] = _mm512_setzero_si512();
      }
    }
    if constexpr (Q == QuantType::q8_0) {
      FUSELM_UNROLL(4)
      for (int kg = 0; kg < 8; kg += 2) {
        const __m512i v0 = _mm512_xor_si512(_mm512_load_si512(c + 64 * kg), flip);
        const __m512i v1 = _mm512_xor_si512(_mm512_load_si512(c + 64 * kg + 64), flip);
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.q + (i0 + r) * k + 32 * b + 4 * kg;
          s0[r] = _mm512_dpbusd_epi32(s0[r], v0, _mm512_set1_epi32(load_i32(x)));
          s1[r] = _mm512_dpbusd_epi32(s1[r], v1, _mm512_set1_epi32(load_i32(x + 4)));
        }
      }
    } else {
      const uint64_t* bits = lay.fifth_bit ? w.bits(g, b) : nullptr;
      FUSELM_UNROLL(4)
      for (int q = 0; q < 4; ++q) {
        __m512i lo, hi;
        unpack_codes<Q>(c, bits, q, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.q + (i0 + r) * k + 32 * b + 4 * q;
          s0[r] = _mm512_dpbusd_epi32(s0[r], lo, _mm512_set1_epi32(load_i32(x)));
          s1[r] = _mm512_dpbusd_epi32(s1[r], hi, _mm512_set1_epi32(load_i32(x + 16)));
        }
      }
    }
    if constexpr (lay.scales16) {
      const __m512 sc0 = block_scales16_half(w, g, b, 0), sc1 = block_scales16_half(w, g, b, 1);
      for (int r = 0; r < R; ++r) {
        const __m512 dx = _mm512_set1_ps(a.d[(i0 + r) * nb + b]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[r]), _mm512_mul_ps(sc0, dx), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[r]), _mm512_mul_ps(sc1, dx), acc[r]);
      }
      continue;
    }
    const __m512 sc = block_scales16<Q>(w, g, b);
    __m512 mn = _mm512_setzero_ps();
    if constexpr (lay.has_min) mn = block_mins16<Q>(w, g, b);
    for (int r = 0; r < R; ++r) {
      const float dx = a.d[(i0 + r) * nb + b], ds = a.dsum[(i0 + r) * nb + b];
      const __m512 t = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[r], s1[r])), _mm512_set1_ps(dx),
                                       _mm512_set1_ps(off * ds));
      acc[r] = _mm512_fmadd_ps(sc, t, acc[r]);
      if constexpr (lay.has_min) acc[r] = _mm512_fmadd_ps(mn, _mm512_set1_ps(ds), acc[r]);  // + m_w·d_x·Σx
    }
  }
}

template <QuantType Q, int R>
void packed_rows(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0) {
  __m512 acc[R];
  packed_tile<Q, R>(*p.w, g, a, i0, acc);
  const int64_t j0 = 16 * g;
  const int lanes = static_cast<int>(p.w->n() - j0 < 16 ? p.w->n() - j0 : 16);
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
  const __m512 bias = p.bias ? _mm512_maskz_loadu_ps(mask, p.bias + j0) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(p.y + (i0 + r) * p.ldy + j0, mask, _mm512_add_ps(acc[r], bias));
}

// The 4 code vectors of a nibble block for G groups against R activation rows (xb: row 0's 32
// codes of the block, row stride k): the low nibbles' dot products (elements 0..15) into lo_sum,
// the high ones' (16..31) into hi_sum, which may be lo_sum itself (one chain per row and group).
template <QuantType Q, int R, int G>
FUSELM_INLINE void dot_nibble_block(const unsigned char* const (&c)[G], const uint64_t* const (&bits)[G],
                                    const int8_t* xb, int64_t k, __m512i (&lo_sum)[R][G], __m512i (&hi_sum)[R][G]) {
  FUSELM_UNROLL(4)
  for (int q = 0; q < 4; ++q) {
    __m512i lo[G], hi[G];
    for (int g = 0; g < G; ++g) unpack_codes<Q>(c[g], bits[g], q, lo[g], hi[g]);
    FUSELM_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const __m512i xl = _mm512_set1_epi32(load_i32(xb + r * k + 4 * q));
      const __m512i xh = _mm512_set1_epi32(load_i32(xb + r * k + 16 + 4 * q));
      for (int g = 0; g < G; ++g) {
        lo_sum[r][g] = _mm512_dpbusd_epi32(lo_sum[r][g], lo[g], xl);
        hi_sum[r][g] = _mm512_dpbusd_epi32(hi_sum[r][g], hi[g], xh);
      }
    }
  }
}

// y rows i0..i0+R, the 16·G columns of groups g0.. (clipped to n): acc + bias.
template <int R, int G>
FUSELM_INLINE void store_tile(const PackedProblem& p, const __m512 (&acc)[R][G], int64_t g0, int64_t i0) {
  for (int g = 0; g < G; ++g) {
    const int64_t j0 = 16 * (g0 + g);
    const int lanes = static_cast<int>(p.w->n() - j0 < 16 ? p.w->n() - j0 : 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
    const __m512 bias = p.bias ? _mm512_maskz_loadu_ps(mask, p.bias + j0) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(p.y + (i0 + r) * p.ldy + j0, mask, _mm512_add_ps(acc[r][g], bias));
  }
}

// Prefill on packed weights (m of 2 or more): a register tile of R activation rows × G groups
// (16G weight rows) over all of k, one int32 chain per (row, group) — R·G independent vpdpbusd
// chains, so no chain split is needed — and each 64-byte code vector loaded (and, for the nibble
// types, unpacked) once for R rows, each activation broadcast once for G groups. The offsets of
// q8_0 (its codes made unsigned, +128), q4_0 (-8) and q5_0 (-16) start the block's int32 sum at
// -off·Σx (exact: the activations' Σq per block is an integer), so a block costs per (row, group)
// eight vpdpbusd and three vector ops (convert, d_w·d_x, fma); a minimum adds m_w·d_x·Σq with
// one fma.
template <QuantType Q, int R, int G>
void gemm_tile(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t i0) {
  constexpr PackedLayout lay = packed_layout(Q);
  const QuantPacked& w = *p.w;
  const int64_t k = w.k(), nb = k / 32, k16 = k / 16;
  constexpr int off = kCodeOffset<Q>;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const int8_t* xq = a.q + i0 * k;
  for (int64_t b = 0; b < nb; ++b) {
    __m512i is[R][G];
    FUSELM_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      __m512i init = _mm512_setzero_si512();
      if constexpr (off != 0) {
        const int16_t* s = a.sum16 + (i0 + r) * k16 + 2 * b;
        init = _mm512_set1_epi32(-off * (s[0] + s[1]));
      }
      for (int g = 0; g < G; ++g) is[r][g] = init;
    }
    const unsigned char* c[G];
    const uint64_t* bits[G];
    for (int g = 0; g < G; ++g) {
      c[g] = w.codes(g0 + g, b);
      bits[g] = lay.fifth_bit ? w.bits(g0 + g, b) : nullptr;
    }
    const int8_t* xb = xq + 32 * b;
    if constexpr (Q == QuantType::q8_0) {
      FUSELM_UNROLL(8)
      for (int kg = 0; kg < 8; ++kg) {
        __m512i v[G];
        for (int g = 0; g < G; ++g) v[g] = _mm512_xor_si512(_mm512_load_si512(c[g] + 64 * kg), flip);
        FUSELM_UNROLL(8)
        for (int r = 0; r < R; ++r) {
          const __m512i x = _mm512_set1_epi32(load_i32(xb + r * k + 4 * kg));
          for (int g = 0; g < G; ++g) is[r][g] = _mm512_dpbusd_epi32(is[r][g], v[g], x);
        }
      }
    } else {
      dot_nibble_block<Q, R, G>(c, bits, xb, k, is, is);
    }
    __m512 sc[G], mn[G];
    for (int g = 0; g < G; ++g) {
      sc[g] = block_scales16<Q>(w, g0 + g, b);
      if constexpr (lay.has_min) mn[g] = block_mins16<Q>(w, g0 + g, b);
    }
    FUSELM_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.d[(i0 + r) * nb + b]);
      for (int g = 0; g < G; ++g)
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r][g]), _mm512_mul_ps(sc[g], dx), acc[r][g]);
      if constexpr (lay.has_min) {
        const __m512 ds = _mm512_set1_ps(a.dsum[(i0 + r) * nb + b]);
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_fmadd_ps(mn[g], ds, acc[r][g]);
      }
    }
  }
  store_tile<R, G>(p, acc, g0, i0);
}

// gemm_tile for q6_k (a scale per 16 elements): two int32 chains per (row, group), the low
// nibbles' (elements 0..15 of the block) and the high ones', each started at -32·Σx of its 16
// and scaled on its own; so at most 4 rows (16 chains and 8 accumulators in registers).
template <int R, int G>
void gemm_tile_q6_k(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t i0) {
  constexpr QuantType Q = QuantType::q6_k;
  constexpr int off = packed_layout(Q).offset;
  const QuantPacked& w = *p.w;
  const int64_t k = w.k(), nb = k / 32, k16 = k / 16;
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const int8_t* xq = a.q + i0 * k;
  for (int64_t b = 0; b < nb; ++b) {
    __m512i lo_sum[R][G], hi_sum[R][G];
    FUSELM_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const int16_t* s = a.sum16 + (i0 + r) * k16 + 2 * b;
      const __m512i init0 = _mm512_set1_epi32(-off * s[0]), init1 = _mm512_set1_epi32(-off * s[1]);
      for (int g = 0; g < G; ++g) lo_sum[r][g] = init0, hi_sum[r][g] = init1;
    }
    const unsigned char* c[G];
    const uint64_t* bits[G];
    for (int g = 0; g < G; ++g) c[g] = w.codes(g0 + g, b), bits[g] = w.bits(g0 + g, b);
    dot_nibble_block<Q, R, G>(c, bits, xq + 32 * b, k, lo_sum, hi_sum);
    __m512 sc0[G], sc1[G];
    for (int g = 0; g < G; ++g)
      sc0[g] = block_scales16_half(w, g0 + g, b, 0), sc1[g] = block_scales16_half(w, g0 + g, b, 1);
    FUSELM_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.d[(i0 + r) * nb + b]);
      for (int g = 0; g < G; ++g) {
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo_sum[r][g]), _mm512_mul_ps(sc0[g], dx), acc[r][g]);
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi_sum[r][g]), _mm512_mul_ps(sc1[g], dx), acc[r][g]);
      }
    }
  }
  store_tile<R, G>(p, acc, g0, i0);
}

// Tile shape of gemm_tile: kGemmRows activation rows × kGemmGroups groups (see gemm_tile); q6_k's
// tile has 4 rows (gemm_tile_q6_k).
inline constexpr int kGemmRows = 6, kGemmGroups = 2;
template <QuantType Q>
inline constexpr int kGemmRowsOf = packed_layout(Q).scales16 ? 4 : kGemmRows;
// Rows from which quant_linear_packed takes gemm_tile on the vnni path.
inline constexpr int64_t kGemmMinRows = 2;

template <QuantType Q, int R, int G>
FUSELM_INLINE void gemm_tile_of(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0) {
  if constexpr (packed_layout(Q).scales16)
    gemm_tile_q6_k<R, G>(p, a, g, i0);
  else
    gemm_tile<Q, R, G>(p, a, g, i0);
}

template <QuantType Q, int G>
void gemm_rows(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0) {
  constexpr int rows = kGemmRowsOf<Q>;
  switch (p.m - i0 >= rows ? rows : p.m - i0) {
    case 6:
      if constexpr (rows >= 6) return gemm_tile_of<Q, 6, G>(p, a, g, i0);
      [[fallthrough]];
    case 5:
      if constexpr (rows >= 5) return gemm_tile_of<Q, 5, G>(p, a, g, i0);
      [[fallthrough]];
    case 4: return gemm_tile_of<Q, 4, G>(p, a, g, i0);
    case 3: return gemm_tile_of<Q, 3, G>(p, a, g, i0);
    case 2: return gemm_tile_of<Q, 2, G>(p, a, g, i0);
    default: return gemm_tile_of<Q, 1, G>(p, a, g, i0);
  }
}

// Groups [g0, g1) for all m rows: kGemmGroups groups at a time (their codes stay in L1/L2 while
// every row tile passes them), row tiles inner.
template <QuantType Q>
void gemm_groups(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  for (int64_t g = g0; g < g1; g += kGemmGroups)
    for (int64_t i0 = 0; i0 < p.m; i0 += kGemmRowsOf<Q>) {
      if (g1 - g >= kGemmGroups)
        gemm_rows<Q, kGemmGroups>(p, a, g, i0);
      else
        gemm_rows<Q, 1>(p, a, g, i0);
    }
}

[[maybe_unused]] void packed_gemm(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  with_packed_type(p.w->type(), [&]<QuantType Q>() { gemm_groups<Q>(p, a, g0, g1); });
}
#else
// The 8 rows' fp32 scales (minimums) of half h of block b, as block_scales16 on the vnni path.
template <QuantType Q>
FUSELM_INLINE __m256 block_scales8(const QuantPacked& w, int64_t g, int64_t b, int h, bool mins) {
  if constexpr (packed_layout(Q).scales16) {  // mins: the scales of elements 16..31 instead
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales16(g, b) + (mins ? 16 : 0) + 8 * h));
    return _mm256_mul_ps(_mm256_loadu_ps(w.ksuper(g, b / 8) + 8 * h), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
  } else if constexpr (packed_layout(Q).k_scales) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.kscales(g, b) + (mins ? 16 : 0) + 8 * h));
    return _mm256_mul_ps(_mm256_loadu_ps(w.ksuper(g, b / 8) + (mins ? 16 : 0) + 8 * h),
                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
  } else {
    const uint16_t* s = mins ? w.mins(g, b) : w.scales(g, b);
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 8 * h)));
  }
}

// Half h's code vector q of a nibble block as unsigned codes: the low nibbles (k = 4q..4q+3 per
// lane) and the high ones (k = 16+4q..), q5_*'s 5th bits (q6_k's 6th too) or-ed in from the half's
// 32 mask bits (fifth_bits).
template <QuantType Q>
FUSELM_INLINE void unpack_half(const QuantPacked& w, int64_t g, int64_t b, int h, int q, __m256i& lo, __m256i& hi) {
  constexpr PackedLayout lay = packed_layout(Q);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load32(w.codes(g, b) + 64 * q + 32 * h);
  lo = _mm256_and_si256(v, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if constexpr (lay.fifth_bit) {
    const auto* mb = reinterpret_cast<const uint8_t*>(w.bits(g, b));
    lo = _mm256_or_si256(lo, fifth_bits(mb + 8 * q + 4 * h));
    hi = _mm256_or_si256(hi, fifth_bits(mb + 8 * (4 + q) + 4 * h));
    if constexpr (lay.sixth_bit) {  // fifth_bits' 0x10 doubled: the 6th bit
      lo = _mm256_or_si256(lo, _mm256_add_epi8(fifth_bits(mb + 64 + 8 * q + 4 * h), fifth_bits(mb + 64 + 8 * q + 4 * h)));
      hi = _mm256_or_si256(hi, _mm256_add_epi8(fifth_bits(mb + 64 + 8 * (4 + q) + 4 * h),
                                               fifth_bits(mb + 64 + 8 * (4 + q) + 4 * h)));
    }
  }
}

// One code vector's pair sums into a row's int32 sums: s += lo·x_lo + hi·x_hi (q6_k: s the low
// nibbles', s_hi the high ones', each scaled on its own).
template <QuantType Q>
FUSELM_INLINE void add_pair_sums(__m256i lo, __m256i hi, __m256i xlo, __m256i xhi, __m256i& s, __m256i& s_hi) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i p0 = _mm256_maddubs_epi16(lo, xlo), p1 = _mm256_maddubs_epi16(hi, xhi);
  if constexpr (packed_layout(Q).scales16) {
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p0, ones));
    s_hi = _mm256_add_epi32(s_hi, _mm256_madd_epi16(p1, ones));
  } else {
    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
  }
}

// q8_0's k-group kg of half h against x's 4 bytes xb (broadcast): through |w| and sign(x, w).
FUSELM_INLINE __m256i add_q8_sums(const unsigned char* c, int h, int kg, __m256i xb, __m256i s) {
  const __m256i v = load32(c + 64 * kg + 32 * h);
  return _mm256_add_epi32(
      s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xb, v)), _mm256_set1_epi16(1)));
}

// Block b of half h scaled into activation row i's accumulator: d_w·(d_x·s - offset·d_x·Σx)
// (+ m_w·d_x·Σx), or q6_k's two scaled halves.
template <QuantType Q>
FUSELM_INLINE void scale_block(const QuantPacked& w, int64_t g, int64_t b, int h, const Q8Acts& a, int64_t i,
                               __m256i s, __m256i s_hi, __m256& acc) {
  constexpr PackedLayout lay = packed_layout(Q);
  const int64_t k = w.k(), nb = k / 32;
  if constexpr (lay.scales16) {
    const __m256 sc0 = block_scales8<Q>(w, g, b, h, false), sc1 = block_scales8<Q>(w, g, b, h, true);
    const int16_t* s16 = a.sum16 + i * (k / 16) + 2 * b;
    const __m256i lo_sum = _mm256_sub_epi32(s, _mm256_set1_epi32(lay.offset * s16[0]));
    const __m256i hi_sum = _mm256_sub_epi32(s_hi, _mm256_set1_epi32(lay.offset * s16[1]));
    const __m256 dx = _mm256_set1_ps(a.d[i * nb + b]);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo_sum), _mm256_mul_ps(sc0, dx), acc);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi_sum), _mm256_mul_ps(sc1, dx), acc);
  } else {
    constexpr float off = static_cast<float>(lay.offset);
    const float dx = a.d[i * nb + b], ds = a.dsum[i * nb + b];
    const __m256 t = _mm256_fmsub_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dx), _mm256_set1_ps(off * ds));
    acc = _mm256_fmadd_ps(block_scales8<Q>(w, g, b, h, false), t, acc);
    if constexpr (lay.has_min) acc = _mm256_fmadd_ps(block_scales8<Q>(w, g, b, h, true), _mm256_set1_ps(ds), acc);
  }
}

// AVX2: rows 16g+8h..16g+8h+7 (one half of the group, 32 bytes of each 64) against activation
// rows i0..i0+R with vpmaddubsw + vpmaddwd.
template <QuantType Q, int R>
void packed_tile(const QuantPacked& w, int64_t g, int h, const Q8Acts& a, int64_t i0, __m256* acc) {
  const int64_t k = w.k(), nb = k / 32;
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s[R], s_hi[R];
    for (int r = 0; r < R; ++r) s[r] = s_hi[r] = _mm256_setzero_si256();
    if constexpr (Q == QuantType::q8_0) {
      const unsigned char* c = w.codes(g, b);
      FUSELM_UNROLL(8)
      for (int kg = 0; kg < 8; ++kg)
        for (int r = 0; r < R; ++r)
          s[r] = add_q8_sums(c, h, kg, _mm256_set1_epi32(load_i32(a.q + (i0 + r) * k + 32 * b + 4 * kg)), s[r]);
    } else {
      FUSELM_UNROLL(4)
      for (int q = 0; q < 4; ++q) {
        __m256i lo, hi;
        unpack_half<Q>(w, g, b, h, q, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.q + (i0 + r) * k + 32 * b + 4 * q;
          add_pair_sums<Q>(lo, hi, _mm256_set1_epi32(load_i32(x)), _mm256_set1_epi32(load_i32(x + 16)), s[r], s_hi[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) scale_block<Q>(w, g, b, h, a, i0 + r, s[r], s_hi[r], acc[r]);
  }
}

// Decode (one activation row): both halves of group g in one pass over its blocks, so that each
// code line is loaded once and each activation broadcast serves 16 rows (packed_tile takes a half
// per pass: each block's lines were read twice, its broadcasts made twice). The same integer and
// fp32 operations per lane as packed_tile<Q, 1>, so the same bits. The codes (and scales)
// `prefetch` bytes ahead are prefetched into L2 (0: none): a thread's groups lie one after another.
// Types without 5th bits (packed_rows).
template <QuantType Q>
void packed_tile_decode(const QuantPacked& w, int64_t g, const Q8Acts& a, int64_t i, int64_t prefetch,
                        __m256 (&acc)[2]) {
  const int64_t nb = w.k() / 32;
  constexpr int64_t code_bytes = Q == QuantType::q8_0 ? 512 : 256;
  acc[0] = acc[1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const unsigned char* c = w.codes(g, b);
    if (prefetch > 0) {
      for (int64_t line = 0; line < code_bytes; line += 64) FUSELM_PREFETCH_L2(c + prefetch + line);
      FUSELM_PREFETCH_L2(reinterpret_cast<const unsigned char*>(w.scales(g, b)) + prefetch / (code_bytes / 32));
    }
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, s_hi[2] = {s[0], s[1]};
    const int8_t* x = a.q + i * w.k() + 32 * b;
    if constexpr (Q == QuantType::q8_0) {
      FUSELM_UNROLL(8)
      for (int kg = 0; kg < 8; ++kg) {
        const __m256i xb = _mm256_set1_epi32(load_i32(x + 4 * kg));
        for (int h = 0; h < 2; ++h) s[h] = add_q8_sums(c, h, kg, xb, s[h]);
      }
    } else {
      FUSELM_UNROLL(4)
      for (int q = 0; q < 4; ++q) {
        const __m256i xlo = _mm256_set1_epi32(load_i32(x + 4 * q)), xhi = _mm256_set1_epi32(load_i32(x + 16 + 4 * q));
        for (int h = 0; h < 2; ++h) {
          __m256i lo, hi;
          unpack_half<Q>(w, g, b, h, q, lo, hi);
          add_pair_sums<Q>(lo, hi, xlo, xhi, s[h], s_hi[h]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) scale_block<Q>(w, g, b, h, a, i, s[h], s_hi[h], acc[h]);
  }
}

// y row i0's lanes of rows 16g+8h.. (clipped to n) from acc, plus bias.
FUSELM_INLINE void store_half(const PackedProblem& p, int64_t g, int h, int64_t i0, __m256 acc) {
  const int64_t j0 = 16 * g + 8 * h;
  if (j0 >= p.w->n()) return;
  const int lanes = static_cast<int>(p.w->n() - j0 < 8 ? p.w->n() - j0 : 8);
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int l = 0; l < lanes; ++l) p.y[i0 * p.ldy + j0 + l] = out[l] + (p.bias ? p.bias[j0 + l] : 0.f);
}

template <QuantType Q, int R>
void packed_rows(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0) {
  // The 5-bit and 6-bit types keep a half per pass: their bit masks' unpacking for both halves at
  // once spilled registers (q5_0, q5_k, q6_k decode measured 1.1-1.7x slower on Zen 3).
  if constexpr (R == 1 && !packed_layout(Q).fifth_bit) {
    __m256 acc[2];
    packed_tile_decode<Q>(*p.w, g, a, i0, p.prefetch, acc);
    for (int h = 0; h < 2; ++h) store_half(p, g, h, i0, acc[h]);
    return;
  }
  for (int h = 0; h < 2; ++h) {
    if (16 * g + 8 * h >= p.w->n()) break;
    __m256 acc[R];
    packed_tile<Q, R>(*p.w, g, h, a, i0, acc);
    for (int r = 0; r < R; ++r) store_half(p, g, h, i0 + r, acc[r]);
  }
}
#endif

// Activation rows [i_begin, m) of row groups [g0, g1) (the AMX path runs the rows before i_begin).
template <QuantType Q>
void packed_simd_rows(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1, int64_t i_begin) {
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t i0 = i_begin; i0 < p.m; i0 += 4) {
      switch (p.m - i0 >= 4 ? 4 : p.m - i0) {
        case 4: packed_rows<Q, 4>(p, a, g, i0); break;
        case 3: packed_rows<Q, 3>(p, a, g, i0); break;
        case 2: packed_rows<Q, 2>(p, a, g, i0); break;
        default: packed_rows<Q, 1>(p, a, g, i0); break;
      }
    }
}

void packed_simd_from(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1, int64_t i_begin) {
  with_packed_type(p.w->type(), [&]<QuantType Q>() { packed_simd_rows<Q>(p, a, g0, g1, i_begin); });
}

// quantize_acts' row loop, shared by the ISA paths: for rows [i0, i1), each block of `block` values
// goes through quantize_block(xb, qb, sums16) (its int8 codes, its Σq per 16, its scale returned),
// then each row's dsum [k/32] = d · Σq per 32.
template <class QuantizeBlock>
void quantize_rows(const float* x, int64_t lda, int64_t i0, int64_t i1, int64_t k, int64_t block, int8_t* q,
                   float* d, int16_t* sum16, float* dsum, QuantizeBlock quantize_block) {
  const int64_t nb = k / block;
  for (int64_t i = i0; i < i1; ++i) {
    const float* xr = x + i * lda;
    int8_t* qr = q + i * k;
    float* dr = d + i * nb;
    int16_t* sr = sum16 + i * (k / 16);
    for (int64_t b = 0; b < nb; ++b) dr[b] = quantize_block(xr + b * block, qr + b * block, sr + b * block / 16);
    float* dsr = dsum + i * (k / 32);
    for (int64_t c = 0; c < k / 32; ++c)
      dsr[c] = dr[c * 32 / block] * static_cast<float>(sr[2 * c] + sr[2 * c + 1]);
  }
}

#if FUSELM_ISA_HAS_AVX512VNNI
// quantize_acts on AVX-512: per 16 values |x| max, x·(127/amax) rounded to nearest even
// (roundscale: the scalar loop's (v + 1.5·2^23) - 1.5·2^23 for |v| < 2^22), clamped to ±127,
// narrowed; Σq per 16 one reduction. The same fp32 operations as the scalar loop, so the same
// bits.
[[maybe_unused]] void quantize_simd(const float* x, int64_t lda, int64_t i0, int64_t i1, int64_t k, int64_t block,
                                    int8_t* q, float* d, int16_t* sum16, float* dsum) {
  const int64_t nv = block / 16;
  const __m512 lim = _mm512_set1_ps(127.f), nlim = _mm512_set1_ps(-127.f);
  quantize_rows(x, lda, i0, i1, k, block, q, d, sum16, dsum, [&](const float* xb, int8_t* qb, int16_t* sb) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t v = 0; v < nv; ++v) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * v)));
    const float amax = _mm512_reduce_max_ps(m);
    const float db = amax / 127.f;
    const float id = db != 0.f ? 127.f / amax : 0.f;
    const __m512 idv = _mm512_set1_ps(id);
    for (int64_t v = 0; v < nv; ++v) {
      __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * v), idv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      t = _mm512_max_ps(_mm512_min_ps(t, lim), nlim);
      const __m512i iv = _mm512_cvtps_epi32(t);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * v), _mm512_cvtepi32_epi8(iv));
      sb[v] = static_cast<int16_t>(_mm512_reduce_add_epi32(iv));
    }
    return db;
  });
}

// The vnni path's packed kernel: one row (decode) on packed_tile's two chains, more on gemm_tile.
[[maybe_unused]] void packed_vnni(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  if (p.m >= kGemmMinRows) return packed_gemm(p, a, g0, g1);
  packed_simd_from(p, a, g0, g1, 0);
}
#else
// quantize_acts on AVX2, as the AVX-512 one above on 8 lanes: |x| max, x·(127/amax) rounded to
// nearest even (vroundps, the scalar loop's (v + 1.5·2^23) - 1.5·2^23 for |v| < 2^22), clamped to
// ±127, narrowed 32 at a time (packs, then a lane permute: vpackssdw / vpacksswb interleave the
// 128-bit lanes); Σq per 16 one reduction. The same fp32 operations, so the same bits.
[[maybe_unused]] void quantize_simd(const float* x, int64_t lda, int64_t i0, int64_t i1, int64_t k, int64_t block,
                                    int8_t* q, float* d, int16_t* sum16, float* dsum) {
  const __m256 lim = _mm256_set1_ps(127.f), nlim = _mm256_set1_ps(-127.f), sign = _mm256_set1_ps(-0.f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  quantize_rows(x, lda, i0, i1, k, block, q, d, sum16, dsum, [&](const float* xb, int8_t* qb, int16_t* sb) {
    __m256 m = _mm256_setzero_ps();
    for (int64_t v = 0; v < block / 8; ++v) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * v)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.f;
    const float id = db != 0.f ? 127.f / amax : 0.f;
    const __m256 idv = _mm256_set1_ps(id);
    for (int64_t c = 0; c < block / 32; ++c) {
      __m256i iv[4];
      for (int v = 0; v < 4; ++v) {
        __m256 t = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * c + 8 * v), idv),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        t = _mm256_max_ps(_mm256_min_ps(t, lim), nlim);
        iv[v] = _mm256_cvtps_epi32(t);
      }
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + 32 * c), _mm256_permutevar8x32_epi32(packed, order));
      sb[2 * c] = static_cast<int16_t>(hsum_i32x8(_mm256_add_epi32(iv[0], iv[1])));
      sb[2 * c + 1] = static_cast<int16_t>(hsum_i32x8(_mm256_add_epi32(iv[2], iv[3])));
    }
    return db;
  });
}
#endif

}  // namespace
}  // namespace fuselm::kernels
