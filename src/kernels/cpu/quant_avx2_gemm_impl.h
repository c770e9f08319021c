// Prefill on packed weights (quant_packed.h) for the levels without VNNI (avx2, and avx512, which
// runs the avx2 table): a register tile of R activation rows × one whole 16-row group (both 8-row
// halves of each 64-byte code vector) over all of k. Included by quant_impl.h after
// quant_simd_impl.h (whose load32, load_i32, fifth_bits, block_scales8 and packed_simd_from it
// uses) where the level has no AVX512_VNNI; includes nothing itself (the ODR rule in simd.h).
//
// Why a tile of its own: the single-half tile of packed_tile widens every vpmaddubsw pair sum to
// int32 (a vpmaddwd and an add per 32 products) and broadcasts each activation once per half.
// Here the nibble types keep their vpmaddubsw sums in int16 for as many steps as cannot overflow
// (a step adds one pair of products, |x| <= 127, per int16 lane: codes <= 15 allow all 8 steps of
// a block, 30480 at most; 5-bit codes 4 steps, 31496; q6_k's 6-bit codes 2, 32004) and widen once
// per block, half or quarter block, so a 4-bit block costs per (row, half) 8 vpmaddubsw, 8 adds
// and one vpmaddwd instead of 8, 8 and 4. A step is one code vector's low nibbles or its high
// ones (all low ones first: q6_k scales them apart), so one step's codes are 2 registers and 5
// rows fit; each broadcast activation serves both halves, each unpacked code vector R rows.
// q8_0's signed codes keep sign(x, w)·|w| (one pair already reaches 32512) and widen every
// step, as llama.cpp's AVX2 q8_0 dot does; its gain is the shared broadcasts and the per-block
// scaling done once per (row, half).
//
// The integer sums are exact, and per block the fp32 operations are packed_tile's (the same
// formula: sc·(Σ·d_x - offset·d_x·Σx) + min·d_x·Σx), so results equal the single-half tile's.
namespace fuselm::kernels {
namespace {  // NOLINT

// 32 bits of a code-bit mask -> `value` in byte e where bit e is set (fifth_bits' bytes; the
// sixth bit's plane takes 0x20).
FUSELM_INLINE __m256i bit_bytes(const uint8_t* bits, char value) {
  const __m256i x10 = fifth_bits(bits);
  return value == 0x10 ? x10 : _mm256_add_epi8(x10, x10);
}

// t += p in int16, t pinned to a register: otherwise GCC computes a whole block's products first
// and spills them to the stack (half the speed).
FUSELM_INLINE void add16(__m256i& t, __m256i p) {
  t = _mm256_add_epi16(t, p);
  __asm__("" : "+x"(t));
}

// Steps (one code vector's low or high nibbles, one vpmaddubsw per half and row) that an int16
// sum of Q's codes takes without overflow, see above: 8 (a whole block) for 4-bit codes, 4 for
// 5-bit, 2 for q6_k (whose low and high nibbles are summed apart anyway).
template <QuantType Q>
inline constexpr int kI16Steps = packed_layout(Q).sixth_bit ? 2 : packed_layout(Q).fifth_bit ? 4 : 8;

// Activation rows per tile. Nibble types: the int16 sums (2 per row), the codes of one step (2), a
// broadcast and the nibble mask, 5 rows fill 14 of the 16 vector registers. q8_0: its int32 sums
// (2 per row), both halves' codes and their absolute values, a broadcast, the ones: 4 rows, 14.
template <QuantType Q>
inline constexpr int kAvx2GemmRows = Q == QuantType::q8_0 ? 4 : 5;

// Step (part, q) of a nibble block, half h (rows 8h..8h+7): code vector q's low nibbles (part 0,
// k = 4q..4q+3 per lane) or high ones (part 1, k = 16+4q..), the 5th (and 6th) bits or-ed in.
template <QuantType Q>
FUSELM_INLINE __m256i unpack_part(const unsigned char* c, const uint64_t* bits, int part, int q, int h) {
  constexpr PackedLayout lay = packed_layout(Q);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load32(c + 64 * q + 32 * h);
  __m256i codes = part ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
  if constexpr (lay.fifth_bit) {
    const auto* mb = reinterpret_cast<const uint8_t*>(bits);
    codes = _mm256_or_si256(codes, bit_bytes(mb + 8 * (4 * part + q) + 4 * h, 0x10));
    if constexpr (lay.sixth_bit) codes = _mm256_or_si256(codes, bit_bytes(mb + 64 + 8 * (4 * part + q) + 4 * h, 0x20));
  }
  return codes;
}

// Adds block b's term of rows i0..i0+R, half h to acc: the int32 sums s (q6_k: s the low
// nibbles', elements 0..15, s_hi the high ones') scaled as packed_tile does.
template <QuantType Q, int R>
FUSELM_INLINE void scale_block(const QuantPacked& w, const Q8Acts& a, int64_t g, int64_t b, int64_t i0, int h,
                               const __m256i (&s)[R], const __m256i (&s_hi)[R], __m256 (&acc)[R]) {
  constexpr PackedLayout lay = packed_layout(Q);
  const int64_t nb = w.k() / 32;
  if constexpr (lay.scales16) {
    const __m256 sc0 = block_scales8<Q>(w, g, b, h, false), sc1 = block_scales8<Q>(w, g, b, h, true);
    FUSELM_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const int16_t* s16 = a.sum16 + (i0 + r) * (w.k() / 16) + 2 * b;
      const __m256i lo_sum = _mm256_sub_epi32(s[r], _mm256_set1_epi32(lay.offset * s16[0]));
      const __m256i hi_sum = _mm256_sub_epi32(s_hi[r], _mm256_set1_epi32(lay.offset * s16[1]));
      const __m256 dx = _mm256_set1_ps(a.d[(i0 + r) * nb + b]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo_sum), _mm256_mul_ps(sc0, dx), acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi_sum), _mm256_mul_ps(sc1, dx), acc[r]);
    }
  } else {
    constexpr float off = static_cast<float>(lay.offset);
    const __m256 sc = block_scales8<Q>(w, g, b, h, false);
    __m256 mn = _mm256_setzero_ps();
    if constexpr (lay.has_min) mn = block_scales8<Q>(w, g, b, h, true);
    FUSELM_UNROLL(4)
    for (int r = 0; r < R; ++r) {
      const float dx = a.d[(i0 + r) * nb + b], ds = a.dsum[(i0 + r) * nb + b];
      const __m256 t = _mm256_fmsub_ps(_mm256_cvtepi32_ps(s[r]), _mm256_set1_ps(dx), _mm256_set1_ps(off * ds));
      acc[r] = _mm256_fmadd_ps(sc, t, acc[r]);
      if constexpr (lay.has_min) acc[r] = _mm256_fmadd_ps(mn, _mm256_set1_ps(ds), acc[r]);
    }
  }
}

// Block b's int32 sums Σ code·x per (row r, half h) into s[h][r] (q6_k: the low nibbles' into s,
// the high ones' into s_hi). xb: row 0's 32 activations of the block.
template <QuantType Q, int R>
FUSELM_INLINE void block_sums(const unsigned char* c, const uint64_t* bits, const int8_t* xb, int64_t k,
                              __m256i (&s)[2][R], __m256i (&s_hi)[2][R]) {
  constexpr PackedLayout lay = packed_layout(Q);
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Q == QuantType::q8_0) {
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < R; ++r) s[h][r] = _mm256_setzero_si256();
    FUSELM_UNROLL(8)
    for (int kg = 0; kg < 8; ++kg) {
      const __m256i w0 = load32(c + 64 * kg), w1 = load32(c + 64 * kg + 32);
      const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
      FUSELM_UNROLL(4)
      for (int r = 0; r < R; ++r) {
        const __m256i x = _mm256_set1_epi32(load_i32(xb + r * k + 4 * kg));
        s[0][r] = _mm256_add_epi32(s[0][r], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, w0)), ones));
        s[1][r] = _mm256_add_epi32(s[1][r], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, w1)), ones));
      }
    }
  } else {
    // Steps in the order low nibbles of q = 0..3, then high ones; an int16 sum per (half, row)
    // over kI16Steps of them, then widened into s (q6_k: the high ones into s_hi).
    constexpr int steps = kI16Steps<Q>;
    FUSELM_UNROLL(4)
    for (int st0 = 0; st0 < 8; st0 += steps) {
      __m256i t[2][R];
      FUSELM_UNROLL(2)
      for (int h = 0; h < 2; ++h)
        FUSELM_UNROLL(8)
        for (int r = 0; r < R; ++r) t[h][r] = _mm256_setzero_si256();
      FUSELM_UNROLL(8)
      for (int st = st0; st < st0 + steps; ++st) {
        const int part = st / 4, q = st % 4;
        const __m256i v0 = unpack_part<Q>(c, bits, part, q, 0), v1 = unpack_part<Q>(c, bits, part, q, 1);
        FUSELM_UNROLL(8)
        for (int r = 0; r < R; ++r) {
          const __m256i x = _mm256_set1_epi32(load_i32(xb + r * k + 16 * part + 4 * q));
          add16(t[0][r], _mm256_maddubs_epi16(v0, x));
          add16(t[1][r], _mm256_maddubs_epi16(v1, x));
        }
      }
      const bool hi = lay.scales16 && st0 >= 4, first = st0 == 0 || (lay.scales16 && st0 == 4);
      FUSELM_UNROLL(2)
      for (int h = 0; h < 2; ++h)
        FUSELM_UNROLL(8)
        for (int r = 0; r < R; ++r) {
          const __m256i v = _mm256_madd_epi16(t[h][r], ones);
          if (hi)
            s_hi[h][r] = first ? v : _mm256_add_epi32(s_hi[h][r], v);
          else
            s[h][r] = first ? v : _mm256_add_epi32(s[h][r], v);
        }
    }
  }
}

// Rows i0..i0+R of y, the 16 columns of group g (clipped to n): the tile over all of k, + bias.
template <QuantType Q, int R>
void avx2_gemm_tile(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0) {
  constexpr PackedLayout lay = packed_layout(Q);
  const QuantPacked& w = *p.w;
  const int64_t k = w.k(), nb = k / 32;
  __m256 acc[2][R];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  const int8_t* xq = a.q + i0 * k;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s[2][R], s_hi[2][R];
    block_sums<Q, R>(w.codes(g, b), lay.fifth_bit ? w.bits(g, b) : nullptr, xq + 32 * b, k, s, s_hi);
    scale_block<Q, R>(w, a, g, b, i0, 0, s[0], s_hi[0], acc[0]);
    scale_block<Q, R>(w, a, g, b, i0, 1, s[1], s_hi[1], acc[1]);
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t j0 = 16 * g + 8 * h;
    if (j0 >= w.n()) break;
    const int lanes = static_cast<int>(w.n() - j0 < 8 ? w.n() - j0 : 8);
    for (int r = 0; r < R; ++r) {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[h][r]);
      for (int l = 0; l < lanes; ++l) p.y[(i0 + r) * p.ldy + j0 + l] = out[l] + (p.bias ? p.bias[j0 + l] : 0.f);
    }
  }
}

// The tile of min(rows, R) rows at i0 (rows > 0).
template <QuantType Q, int R>
FUSELM_INLINE void avx2_gemm_rows(const PackedProblem& p, const Q8Acts& a, int64_t g, int64_t i0, int64_t rows) {
  if constexpr (R > 1)
    if (rows < R) return avx2_gemm_rows<Q, R - 1>(p, a, g, i0, rows);
  avx2_gemm_tile<Q, R>(p, a, g, i0);
}

// Groups [g0, g1) for all m rows: a group's codes (16 rows × k) stay in L1 while every row tile
// passes them.
template <QuantType Q>
void avx2_gemm_groups(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  constexpr int rows = kAvx2GemmRows<Q>;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t i0 = 0; i0 < p.m; i0 += rows) avx2_gemm_rows<Q, rows>(p, a, g, i0, p.m - i0);
}

// Rows of x from which quant_linear_packed takes the tile on this path (one row: packed_tile's
// two chains per half, the decode GEMV).
inline constexpr int64_t kAvx2GemmMinRows = 2;

// The avx2 path's packed kernel: decode on packed_tile (packed_simd_from), prefill on
// avx2_gemm_tile.
[[maybe_unused]] void packed_avx2(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  if (p.m < kAvx2GemmMinRows) return packed_simd_from(p, a, g0, g1, 0);
  with_packed_type(p.w->type(), [&]<QuantType Q>() { avx2_gemm_groups<Q>(p, a, g0, g1); });
}

}  // namespace
}  // namespace fuselm::kernels
