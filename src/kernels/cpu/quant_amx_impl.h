// quant_linear_packed on AMX int8 tiles (internal; the amx level's quant path, included by
// quant_impl.h after quant_simd_impl.h for a level with AMX-INT8), for prefill: 16 activation rows × 16 weight rows per
// tile product. Everything else (the raw-block kernels, fewer than 16 rows, the m % 16 rows left
// over, q6_k) runs the VNNI bodies of quant_simd_impl.h, compiled again for this level.
//
// Per 32-block b of a weight group g (16 rows) and 16 activation rows i0.., one tile product
// C[16 x 16] int32 = A · B: A the rows' int8 codes of block b (16 rows × 32 bytes, row stride k),
// B the group's codes of block b in the VNNI layout, which is the packed layout itself: 8 rows
// (k-groups of 4) × 16 lanes × 4 bytes (q8_0: tdpbssd on the signed codes as they are; q4_0 and
// q5_0: the codes spread once per group into a scratch B, minus their offset, tdpbssd; the types
// with a minimum: spread, tdpbsud). C goes to a 1 KiB buffer and is scaled per row (d_w ⊙ d_x·C,
// + m_w·d_x·Σq with a minimum) into 16 fp32 accumulators that stay in registers over all of k. Two C, A and B tiles alternate between even
// and odd blocks, so one block's tile product overlaps the previous one's scaling. Integer sums
// are exact, so the result equals the VNNI path's up to the order of fp32 additions.
namespace fuselm::kernels {
namespace {  // NOLINT

// Palette 1: tmm0, tmm1 C (16 × 64 B); tmm2, tmm3 A (16 rows × 32 B); tmm4, tmm5 B (8 × 64 B).
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void load_amx_config() {
  AmxConfig c;
  c.colsb[0] = c.colsb[1] = 64, c.rows[0] = c.rows[1] = 16;
  c.colsb[2] = c.colsb[3] = 32, c.rows[2] = c.rows[3] = 16;
  c.colsb[4] = c.colsb[5] = 64, c.rows[4] = c.rows[5] = 8;
  _tile_loadconfig(&c);
}

// Nibble types: the 4 packed code vectors of each block spread into the 8 k-group rows of B
// (rows 0..3: the low nibbles, k = 4q..4q+3; rows 4..7: the high ones, k = 16+4q..), q5_*'s 5th
// bits added; q4_0's and q5_0's codes minus their offset, so that their tile product is signed
// (tdpbssd) and needs no Σx term. The types with a minimum keep unsigned codes (tdpbsud).
template <QuantType Q>
void spread_nibbles(const QuantPacked& w, int64_t g, unsigned char* out) {
  const __m512i off = _mm512_set1_epi8(static_cast<char>(packed_layout(Q).offset));
  for (int64_t b = 0; b < w.k() / 32; ++b) {
    const unsigned char* c = w.codes(g, b);
    const uint64_t* bits = packed_layout(Q).fifth_bit ? w.bits(g, b) : nullptr;
    for (int q = 0; q < 4; ++q) {
      __m512i lo, hi;
      unpack_codes<Q>(c, bits, q, lo, hi);
      _mm512_store_si512(out + 512 * b + 64 * q, _mm512_sub_epi8(lo, off));
      _mm512_store_si512(out + 512 * b + 256 + 64 * q, _mm512_sub_epi8(hi, off));
    }
  }
}

// Operands of one (weight group, 16 activation rows) tile.
struct AmxTile {
  const QuantPacked* w;
  const int8_t* xq;   // activation codes of row i0, block 0 (row stride k)
  const float* dx;    // d_x of row i0, block 0 (row stride nb)
  const float* ds;    // d_x·Σq of row i0, block 0 (row stride nb)
  const unsigned char* bc;  // B of block 0 (512 B per block)
  int32_t* cbuf;      // 2 × 1 KiB: C of even and odd blocks
  int64_t g, k, nb;
};

// Tile product of block b into C tile T (A tile T+2, B tile T+4) and its store to cbuf[T].
// GCC's tile intrinsics paste their tile numbers into the assembly: literals only.
template <QuantType Q, int T>
FUSELM_INLINE void amx_product(const AmxTile& t, int64_t b) {
#define FUSELM_AMX_PRODUCT(C, A, B)                    \
  _tile_loadd(A, t.xq + 32 * b, t.k);                  \
  _tile_loadd(B, t.bc + 512 * b, 64);                  \
  _tile_zero(C);                                       \
  if constexpr (packed_layout(Q).has_min)             \
    _tile_dpbsud(C, A, B);                             \
  else                                                 \
    _tile_dpbssd(C, A, B);                             \
  _tile_stored(C, t.cbuf + 256 * (C), 64)
  if constexpr (T == 0) {
    FUSELM_AMX_PRODUCT(0, 2, 4);
  } else {
    FUSELM_AMX_PRODUCT(1, 3, 5);
  }
#undef FUSELM_AMX_PRODUCT
}

// C of block b (cbuf[T]) into the accumulators: acc_r += d_w ⊙ (d_x·C_r) (+ m_w·d_x·Σq for a type with a minimum).
template <QuantType Q, int T>
FUSELM_INLINE void amx_scale(const AmxTile& t, int64_t b, __m512* acc) {
  const int32_t* c = t.cbuf + 256 * T;
  const __m512 sc = block_scales16<Q>(*t.w, t.g, b);
  __m512 mn = _mm512_setzero_ps();
  if constexpr (packed_layout(Q).has_min) mn = block_mins16<Q>(*t.w, t.g, b);
  FUSELM_UNROLL(16)
  for (int r = 0; r < 16; ++r) {
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r)), _mm512_set1_ps(t.dx[r * t.nb + b]));
    acc[r] = _mm512_fmadd_ps(sc, v, acc[r]);
    if constexpr (packed_layout(Q).has_min) acc[r] = _mm512_fmadd_ps(mn, _mm512_set1_ps(t.ds[r * t.nb + b]), acc[r]);
  }
}

// y rows i0..i0+15, columns 16g.. (clipped to n) of group g. Block b+1's tile product is issued
// before block b is scaled, so the tile unit and the vector units overlap.
template <QuantType Q>
void amx_tile(const PackedProblem& p, const AmxTile& t, int64_t i0) {
  __m512 acc[16];
  for (auto& v : acc) v = _mm512_setzero_ps();
  const int64_t nb = t.nb;
  amx_product<Q, 0>(t, 0);
  for (int64_t b = 0; b < nb; b += 2) {
    if (b + 1 < nb) amx_product<Q, 1>(t, b + 1);
    amx_scale<Q, 0>(t, b, acc);
    if (b + 2 < nb) amx_product<Q, 0>(t, b + 2);
    if (b + 1 < nb) amx_scale<Q, 1>(t, b + 1, acc);
  }
  const int64_t j0 = 16 * t.g;
  const int lanes = static_cast<int>(p.w->n() - j0 < 16 ? p.w->n() - j0 : 16);
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
  const __m512 bias = p.bias ? _mm512_maskz_loadu_ps(mask, p.bias + j0) : _mm512_setzero_ps();
  for (int r = 0; r < 16; ++r) _mm512_mask_storeu_ps(p.y + (i0 + r) * p.ldy + j0, mask, _mm512_add_ps(acc[r], bias));
}

template <QuantType Q>
void amx_groups(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1, int64_t m16) {
  const QuantPacked& w = *p.w;
  const int64_t k = w.k(), nb = k / 32;
  constexpr bool q8 = Q == QuantType::q8_0;
  // 2 KiB of C (two tiles), then B of one group for q4 (nb × 512 B).
  float* scratch = thread_scratch(2, static_cast<size_t>(512 + (q8 ? 0 : nb * 128)));
  auto* spread = reinterpret_cast<unsigned char*>(scratch + 512);
  for (int64_t g = g0; g < g1; ++g) {
    if constexpr (!q8) spread_nibbles<Q>(w, g, spread);
    // q8_0's B is the packed codes themselves (a group's blocks are contiguous).
    AmxTile t{&w, nullptr, nullptr, nullptr, q8 ? w.codes(g, 0) : spread, reinterpret_cast<int32_t*>(scratch), g, k, nb};
    for (int64_t i0 = 0; i0 < m16; i0 += 16) {
      t.xq = a.q + i0 * k, t.dx = a.d + i0 * nb, t.ds = a.dsum + i0 * nb;
      amx_tile<Q>(p, t, i0);
    }
  }
}

// Groups [g0, g1): whole 16-row tiles of x on AMX, the rest of the rows on the VNNI tile.
void packed_amx(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  const int64_t m16 = p.m / 16 * 16;
  // Fewer than 16 rows take the vnni path as on a machine without AMX (its gemm tile from 2 rows);
  // so does q6_k, whose scale per 16 would halve the tile product's depth.
  if (m16 == 0 || p.w->layout().scales16) return packed_vnni(p, a, g0, g1);
  load_amx_config();
  with_packed_type(p.w->type(), [&]<QuantType Q>() {
    if constexpr (!packed_layout(Q).scales16) amx_groups<Q>(p, a, g0, g1, m16);
  });
  _tile_release();
  if (m16 < p.m) packed_simd_from(p, a, g0, g1, m16);
}

}  // namespace
}  // namespace fuselm::kernels
