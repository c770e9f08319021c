// Vec<Isa::avx2>: 8 fp32 lanes in a __m256. Include only inside a level's target region
// (isa_table.cc.in), after simd.h (see the ODR rule there).
#if FUSELM_X86_ISAS
namespace fuselm::kernels {
namespace {  // NOLINT

template <>
struct Vec<Isa::avx2> {
  using R = __m256;
  using M = __m256;
  static constexpr int W = 8;
  static constexpr Isa isa = Isa::avx2;

  static __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float a) { return _mm256_set1_ps(a); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static R loadn(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static void storen(float* p, R v, int n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static R bf16x8_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static __m128i load_u16_tail(const uint16_t* p, int n) {
    alignas(16) uint16_t buf[8] = {};
    for (int i = 0; i < n; ++i) buf[i] = p[i];
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  static R load_bf16(const uint16_t* p) {
    return bf16x8_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static R loadn_bf16(const uint16_t* p, int n) { return bf16x8_to_f32(load_u16_tail(p, n)); }
  static R load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static R loadn_f16(const uint16_t* p, int n) { return _mm256_cvtph_ps(load_u16_tail(p, n)); }
  // W int8 values as fp32 (the q8_0 KV cache)
  static R load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }

  // 2·W bf16 values: even = elements 0, 2, 4, ..., odd = elements 1, 3, 5, ... (as fp32): a
  // 32-bit word holds element 2i in its low half and 2i+1 in its high half
  static void load_bf16_pairs(const uint16_t* p, R& even, R& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R abs(R a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  static R neg(R a) { return _mm256_xor_ps(_mm256_set1_ps(-0.f), a); }
  static R sqrt(R a) { return _mm256_sqrt_ps(a); }
  static float hsum(R v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }
  static float hmax(R v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static M lt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static R select(M m, R a, R b) { return _mm256_blendv_ps(b, a, m); }

  // exp: Cephes expf (Cody-Waite reduction, degree-5 polynomial, ~1 ulp); overflow -> inf,
  // underflow -> subnormal/0, NaN -> NaN.
  static R exp(R x) {
    x = _mm256_max_ps(_mm256_set1_ps(-110.f), _mm256_min_ps(_mm256_set1_ps(89.f), x));
    const R n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    R p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    // p * 2^n as p * 2^n1 * 2^n2 with n1 = n >> 1, so both factors are normal for n in [-159, 129]
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const R s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const R s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }

  // Lane i: the sum of r[i]'s lanes (W horizontal sums at once): a tree of unpacks and adds, 14
  // shuffles where transpose() takes 24.
  static R sum_rows(const R (&r)[W]) {
    R u[2];  // u[g], 128-bit lane L: the sums of lane L's 4 values of r[4g], .., r[4g + 3]
    for (int g = 0; g < 2; ++g) {
      const R* v = r + 4 * g;
      const __m256d a = _mm256_castps_pd(_mm256_add_ps(_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1])));
      const __m256d b = _mm256_castps_pd(_mm256_add_ps(_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3])));
      u[g] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
  }

  static void transpose(R (&r)[W]) {
    const R t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const R t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const R t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const R t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const R s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const R s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const R s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const R s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
  }
};

}  // namespace
}  // namespace fuselm::kernels
#endif  // FUSELM_X86_ISAS
