// Vec<Isa::avx512>: 16 fp32 lanes in a __m512. Include only inside a level's target region
// (isa_table.cc.in), after simd.h (see the ODR rule there).
#if FUSELM_X86_ISAS
namespace fuselm::kernels {
namespace {  // NOLINT

template <>
struct Vec<Isa::avx512> {
  using R = __m512;
  using M = __mmask16;
  static constexpr int W = 16;
  static constexpr Isa isa = Isa::avx512;

  static __mmask16 tail_mask(int n) {
    return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << (n < 0 ? 0 : n)) - 1u);
  }
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float a) { return _mm512_set1_ps(a); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static R loadn(const float* p, int n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static void storen(float* p, R v, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static R bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static R load_bf16(const uint16_t* p) {
    return bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static R loadn_bf16(const uint16_t* p, int n) {
    return bf16x16_to_f32(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
  static R load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static R loadn_f16(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
  // W int8 values as fp32 (the q8_0 KV cache)
  static R load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }

  // 2·W bf16 values: even = elements 0, 2, 4, ..., odd = elements 1, 3, 5, ... (as fp32): a
  // 32-bit word holds element 2i in its low half and 2i+1 in its high half
  static void load_bf16_pairs(const uint16_t* p, R& even, R& odd) {
    const __m512i v = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R abs(R a) { return _mm512_abs_ps(a); }
  static R neg(R a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  }
  static R sqrt(R a) { return _mm512_sqrt_ps(a); }
  static float hsum(R v) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 t = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, t);
    return _mm_cvtss_f32(_mm_add_ss(t, sh));
  }
  static float hmax(R v) {
    __m256 s = _mm256_max_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static M lt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static R select(M m, R a, R b) { return _mm512_mask_blend_ps(m, b, a); }

  // exp: Cephes expf polynomial (~1 ulp), scaled with vscalefps (overflow -> inf, underflow ->
  // subnormal/0, NaN -> NaN: the clamps keep a NaN x because min/max return their second operand).
  static R exp(R x) {
    x = _mm512_max_ps(_mm512_set1_ps(-110.f), _mm512_min_ps(_mm512_set1_ps(89.f), x));
    const R n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    R p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_scalef_ps(p, n);
  }

  // Lane i: the sum of r[i]'s lanes (W horizontal sums at once). A tree of unpacks and adds: 30
  // shuffles, where transpose() and 15 adds take 48.
  static R sum_rows(const R (&r)[W]) {
    R u[4];  // u[g], 128-bit lane L: the sums of lane L's 4 values of r[4g], .., r[4g + 3]
    FUSELM_UNROLL(4)
    for (int g = 0; g < 4; ++g) {
      const R* v = r + 4 * g;
      const __m512d a = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1])));
      const __m512d b = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3])));
      u[g] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    // 128-bit lanes (L0 + L1, L2 + L3) of u[0], u[1], then of u[2], u[3]
    const R w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
    const R w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xdd));
  }

  static void transpose(R (&r)[W]) {
    R t[16];
    FUSELM_UNROLL(8)
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    FUSELM_UNROLL(4)
    for (int i = 0; i < 4; ++i) {
      const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
      const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
      r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
      r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
      r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    // r[4i+j], 128-bit lane L, holds rows 4i..4i+3 of column 4L+j
    FUSELM_UNROLL(4)
    for (int j = 0; j < 4; ++j) {
      const R a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);       // L0, L2 of r[j], r[4+j]
      const R b = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);  // L0, L2 of r[8+j], r[12+j]
      const R c = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);       // L1, L3
      const R d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
      t[j] = _mm512_shuffle_f32x4(a, b, 0x88);       // column j
      t[8 + j] = _mm512_shuffle_f32x4(a, b, 0xdd);   // column 8+j
      t[4 + j] = _mm512_shuffle_f32x4(c, d, 0x88);   // column 4+j
      t[12 + j] = _mm512_shuffle_f32x4(c, d, 0xdd);  // column 12+j
    }
    FUSELM_UNROLL(16)
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
};

}  // namespace
}  // namespace fuselm::kernels
#endif  // FUSELM_X86_ISAS
