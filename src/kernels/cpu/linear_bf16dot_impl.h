// linear kernels for bf16 weights with AVX512_BF16's vdpbf16ps (internal; included only by
// linear_impl.h, for a level with AVX512_BF16).
//
// The activations are rounded to bf16 (round to nearest even) once per call into per-thread
// scratch, rows zero-padded to a multiple of 32; every product of two bf16 values is exact in
// fp32 and vdpbf16ps adds the two products of a (k, k+1) pair into an fp32 accumulator, so the
// result is the fp32 dot product of bf16(x) and W (as a plain fp32 loop over bf16(x) would give it,
// up to summation order; vdpbf16ps flushes denormals).
//
// GEMV (decode, nk): NB rows of W at a time, 32 weights per load, one vdpbf16ps per row of x, so
//   that one weight byte costs 1/64 of an instruction per row of x instead of the widening path's
//   shift, and and two FMAs per 16 weights. Each load also prefetches the same line of the next
//   block of NB rows into L2 (FUSELM_PREFETCH_L2).
// GEMM (prefill, and decode with a [k, n] W): as gemm_dtype in linear_impl.h, but panels hold
//   (k, k+1) pairs of bf16 weights in one 32-bit word, bp[k/2][NR], half the bytes of the fp32
//   panels; the MR×NR micro-kernel broadcasts a pair of x and issues one vdpbf16ps per 16 columns,
//   32 multiply-adds per instruction (twice the fp32 FMA's).
namespace fuselm::kernels {
namespace {  // NOLINT

constexpr int kDotNV = 4;                // GEMM panel vectors (16 columns each)
constexpr int64_t kDotNR = 16 * kDotNV;  // GEMM panel columns
constexpr int kDotMR = 6;                // GEMM micro-tile rows (24 accumulators)
constexpr int64_t kDotKCP = 128;         // k pairs per block: a 32 KiB slice of a panel (L1)
constexpr int64_t kDotMC = 480;          // rows per block

FUSELM_INLINE __mmask32 mask32(int64_t n) {
  return n <= 0 ? 0 : n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << n) - 1);
}
FUSELM_INLINE __mmask16 mask16(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << n) - 1);
}
FUSELM_INLINE __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

inline int64_t round_up32(int64_t k) { return (k + 31) / 32 * 32; }

// Rows [m0, m0 + rows) of x rounded to bf16 into xb (row stride ldb, a multiple of 32 >= k,
// zero past k).
void x_to_bf16(const LinearProblem& p, int64_t m0, int64_t rows, uint16_t* xb, int64_t ldb) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = p.x + (m0 + i) * p.lda;
    uint16_t* d = xb + i * ldb;
    for (int64_t kk = 0; kk < ldb; kk += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(mask16(p.k - kk), xr + kk);
      const __m512 hi = _mm512_maskz_loadu_ps(mask16(p.k - kk - 16), xr + kk + 16);
      const __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);  // lanes 0..15 from lo, 16..31 from hi
      _mm512_storeu_si512(d + kk, reinterpret_cast<const __m512i&>(b));
    }
  }
}

uint16_t* x_scratch(int64_t rows, int64_t ldb) {
  return reinterpret_cast<uint16_t*>(thread_scratch(1, static_cast<size_t>(rows * ldb / 2 + 16)));
}

// ---------------------------------------------------------------------------------------- GEMV

// y[m0+i, j0+j] for i < M, j < NB: NB rows of an [n, k] bf16 W against M rows of bf16 x.
template <int M, int NB>
FUSELM_INLINE void dot_gemv_block(const LinearProblem& p, int64_t m0, int64_t j0, const uint16_t* xb,
                                  int64_t ldb) {
  const uint16_t* w = static_cast<const uint16_t*>(p.w) + j0 * p.ldw;
  __m512 acc[NB][M];
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  const int64_t k = p.k, kfull = k - k % 32;
  for (int64_t kk = 0; kk < kfull; kk += 32) {
    __m512bh xv[M];
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) xv[i] = as_bh(_mm512_loadu_si512(xb + i * ldb + kk));
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      const __m512bh wv = as_bh(_mm512_loadu_si512(w + j * p.ldw + kk));
      FUSELM_PREFETCH_L2(w + (j + NB) * p.ldw + kk);  // the next block's line
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i) acc[j][i] = _mm512_dpbf16_ps(acc[j][i], wv, xv[i]);
    }
  }
  if (kfull < k) {  // masked weights; x is zero-padded to 32
    const __mmask32 mk = mask32(k - kfull);
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(mk, w + j * p.ldw + kfull));
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i)
        acc[j][i] = _mm512_dpbf16_ps(acc[j][i], wv, as_bh(_mm512_loadu_si512(xb + i * ldb + kfull)));
    }
  }
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    const float b = p.bias ? p.bias[j0 + j] : 0.f;
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) p.y[(m0 + i) * p.ldy + j0 + j] = _mm512_reduce_add_ps(acc[j][i]) + b;
  }
}

// S rows at once, row j + s * part for s < S, one cache line (32 weights) of each in turn
// (CpuTuning::gemv_streams; as gemv_nk_row_streams in linear_impl.h): S sequential streams far
// apart keep more DRAM pages and prefetch streams busy than one.
template <int S>
FUSELM_INLINE void dot_gemv_row_streams(const LinearProblem& p, int64_t m0, int64_t j, int64_t part,
                                        const uint16_t* xb) {
  constexpr int A = S >= 4 ? 1 : 4 / S;  // accumulators per row: at least 4 chains in flight
  const uint16_t* w[S];
  __m512 acc[S][A];
  FUSELM_UNROLL(8)
  for (int s = 0; s < S; ++s) {
    w[s] = static_cast<const uint16_t*>(p.w) + (j + s * part) * p.ldw;
    FUSELM_UNROLL(4)
    for (int a = 0; a < A; ++a) acc[s][a] = _mm512_setzero_ps();
  }
  const int64_t k = p.k, kfull = k - k % (32 * A), ahead = p.gemv_prefetch / 2;
  int64_t kk = 0;
  for (; kk < kfull; kk += 32 * A) {
    __m512bh xv[A];
    FUSELM_UNROLL(4)
    for (int a = 0; a < A; ++a) xv[a] = as_bh(_mm512_loadu_si512(xb + kk + 32 * a));
    FUSELM_UNROLL(8)
    for (int s = 0; s < S; ++s) {
      if (ahead > 0) FUSELM_PREFETCH_L2(w[s] + kk + ahead);
      FUSELM_UNROLL(4)
      for (int a = 0; a < A; ++a)
        acc[s][a] = _mm512_dpbf16_ps(acc[s][a], as_bh(_mm512_loadu_si512(w[s] + kk + 32 * a)), xv[a]);
    }
  }
  for (; kk < k; kk += 32) {  // masked weights; x is zero-padded to 32
    const __m512bh xv = as_bh(_mm512_loadu_si512(xb + kk));
    FUSELM_UNROLL(8)
    for (int s = 0; s < S; ++s)
      acc[s][0] = _mm512_dpbf16_ps(acc[s][0], as_bh(_mm512_maskz_loadu_epi16(mask32(k - kk), w[s] + kk)), xv);
  }
  FUSELM_UNROLL(8)
  for (int s = 0; s < S; ++s) {
    __m512 t = acc[s][0];
    FUSELM_UNROLL(4)
    for (int a = 1; a < A; ++a) t = _mm512_add_ps(t, acc[s][a]);
    const int64_t row = j + s * part;
    p.y[m0 * p.ldy + row] = _mm512_reduce_add_ps(t) + (p.bias ? p.bias[row] : 0.f);
  }
}

// Rows [n0, n1) at one row of x in memory order, S streams; the rows left over after S equal parts
// one at a time.
template <int S>
void dot_gemv_streams(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1, const uint16_t* xb) {
  const int64_t part = (n1 - n0) / S;
  for (int64_t j = n0; j < n0 + part; ++j) dot_gemv_row_streams<S>(p, m0, j, part, xb);
  for (int64_t j = n0 + S * part; j < n1; ++j) dot_gemv_row_streams<1>(p, m0, j, 0, xb);
}

template <int M>
void dot_gemv_rows(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1, const uint16_t* xb,
                   int64_t ldb) {
  constexpr int NB = LinearTuning<Isa::avx512>::gemv_nb(M);
  int64_t j = n0;
  if constexpr (M == 1) {  // batched decode keeps interleaving (CpuTuning::gemv_memory_order)
    if (p.gemv_memory_order) {
      switch (p.gemv_streams) {
        case 2: return dot_gemv_streams<2>(p, m0, n0, n1, xb);
        case 4: return dot_gemv_streams<4>(p, m0, n0, n1, xb);
        case 8: return dot_gemv_streams<8>(p, m0, n0, n1, xb);
        default: return dot_gemv_streams<1>(p, m0, n0, n1, xb);
      }
    }
  }
  for (; j + NB <= n1; j += NB) dot_gemv_block<M, NB>(p, m0, j, xb, ldb);
  for (; j < n1; ++j) dot_gemv_block<M, 1>(p, m0, j, xb, ldb);
}

// ---------------------------------------------------------------------------------------- GEMM

// k pairs of a panel: ceil(k / 2) rounded up to 16 (the rows of an AMX tile), zero-padded.
inline int64_t panel_pairs(int64_t k) { return ((k + 1) / 2 + 15) / 16 * 16; }

// Packs columns [nb, nb + NR) ∩ [., n_end) of an [n, k] bf16 W as pairs bp[kp][NR] (kp =
// panel_pairs(k)): word (q, j) = W(j, 2q) | W(j, 2q+1) << 16; zero past n_end and past k.
// 16 rows × 16 pairs at a time, transposed as 32-bit words in registers, reading each row front
// to back.
void pack_pairs_nk(const LinearProblem& p, int64_t nb, int64_t n_end, uint32_t* bp) {
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const int64_t kp = panel_pairs(p.k);
  for (int64_t jb = 0; jb < kDotNR; jb += 16) {
    const int valid = clamp_lanes(n_end - (nb + jb), 16);
    for (int64_t kb = 0; kb < kp; kb += 16) {
      const __mmask32 mk = mask32(p.k - 2 * kb);
      __m512 r[16];
      FUSELM_UNROLL(16)
      for (int i = 0; i < 16; ++i)
        r[i] = i >= valid ? _mm512_setzero_ps()
                          : _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mk, w + (nb + jb + i) * p.ldw + 2 * kb));
      Vec<Isa::avx512>::transpose(r);  // r[q]: pair kb+q of the 16 columns
      FUSELM_UNROLL(16)
      for (int q = 0; q < 16; ++q)
        _mm512_storeu_ps(reinterpret_cast<float*>(bp + (kb + q) * kDotNR + jb), r[q]);
    }
  }
}

// The same panel from a [k, n] bf16 W: rows 2kp and 2kp+1 widened and interleaved.
void pack_pairs_kn(const LinearProblem& p, int64_t nb, int64_t n_end, uint32_t* bp) {
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const int64_t kp = panel_pairs(p.k);
  for (int64_t q = 0; q < kp; ++q) {
    if (2 * q >= p.k) {  // padding pairs
      for (int v = 0; v < kDotNV; ++v) _mm512_storeu_si512(bp + q * kDotNR + 16 * v, _mm512_setzero_si512());
      continue;
    }
    const uint16_t* r0 = w + 2 * q * p.ldw + nb;
    const uint16_t* r1 = r0 + p.ldw;
    const bool has_odd = 2 * q + 1 < p.k;
    FUSELM_UNROLL(4)
    for (int v = 0; v < kDotNV; ++v) {
      const __mmask16 mc = mask16(n_end - (nb + 16 * v));
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mc, r0 + 16 * v));
      const __m512i hi = has_odd ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mc, r1 + 16 * v))
                                 : _mm512_setzero_si512();
      _mm512_storeu_si512(bp + q * kDotNR + 16 * v, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// c[MR, ncols] (+)= a[MR, 2·kcp] · bp[kcp, NR] with a and bp as bf16 pairs (a rows at lda32
// words); starts from c (accumulate), else from bias (if any), else zero.
template <int MR, int NV>
void dot_micro(int64_t kcp, const uint32_t* a, int64_t lda32, const uint32_t* bp, float* c, int64_t ldc,
               int ncols, bool accumulate, const float* bias) {
  __m512 acc[MR][NV];
  FUSELM_UNROLL(8)
  for (int i = 0; i < MR; ++i) {
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < kcp; ++q) {
    __m512bh b[NV];
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) b[v] = as_bh(_mm512_loadu_si512(bp + q * kDotNR + 16 * v));
    FUSELM_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = as_bh(_mm512_set1_epi32(static_cast<int>(a[i * lda32 + q])));
      FUSELM_UNROLL(8)
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, b[v]);
    }
  }
  FUSELM_UNROLL(8)
  for (int i = 0; i < MR; ++i) {
    float* cr = c + i * ldc;
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mc = mask16(ncols - 16 * v);
      if (!mc) continue;
      const __m512 base = accumulate ? _mm512_maskz_loadu_ps(mc, cr + 16 * v)
                          : bias     ? _mm512_maskz_loadu_ps(mc, bias + 16 * v)
                                     : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(cr + 16 * v, mc, _mm512_add_ps(acc[i][v], base));
    }
  }
}

template <int NV>
void dot_micro_rows(int mr, int64_t kcp, const uint32_t* a, int64_t lda32, const uint32_t* bp, float* c,
                    int64_t ldc, int ncols, bool accumulate, const float* bias) {
  switch (mr) {
    case 1: return dot_micro<1, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 2: return dot_micro<2, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 3: return dot_micro<3, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 4: return dot_micro<4, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 5: return dot_micro<5, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    default: return dot_micro<6, NV>(kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
  }
}

void dot_micro_any(int nv, int mr, int64_t kcp, const uint32_t* a, int64_t lda32, const uint32_t* bp,
                   float* c, int64_t ldc, int ncols, bool accumulate, const float* bias) {
  switch (nv) {
    case 1: return dot_micro_rows<1>(mr, kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 2: return dot_micro_rows<2>(mr, kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    case 3: return dot_micro_rows<3>(mr, kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
    default: return dot_micro_rows<4>(mr, kcp, a, lda32, bp, c, ldc, ncols, accumulate, bias);
  }
}

// Columns per packed block: all of K for about 1 MiB of panels (L2), as gemm_dtype.
inline int64_t pack_block_cols(int64_t kp) {
  constexpr int64_t kPackBytes = int64_t{1} << 20;
  return std::clamp<int64_t>(kPackBytes / (4 * kp) / kDotNR * kDotNR, kDotNR, 1024);
}

// Packs the panels of columns [nc0, nc0 + nc) into bp (panel pn at bp + pn·kp·NR).
void pack_block(const LinearProblem& p, int64_t nc0, int64_t nc, int64_t kp, uint32_t* bp) {
  const int64_t panels = (nc + kDotNR - 1) / kDotNR;
  for (int64_t pn = 0; pn < panels; ++pn) {
    if (p.w_layout == WeightLayout::nk)
      pack_pairs_nk(p, nc0 + pn * kDotNR, nc0 + nc, bp + pn * kp * kDotNR);
    else
      pack_pairs_kn(p, nc0 + pn * kDotNR, nc0 + nc, bp + pn * kp * kDotNR);
  }
}

// The panels of columns [nc0, nc0 + nc): p.packed's where nc0 starts a panel (linear.cc splits
// the GEMM's columns on whole panels; the GEMV's [k, n] fallback splits on 16), else packed now
// into scratch.
const uint32_t* block_panels(const LinearProblem& p, int64_t nc0, int64_t nc, int64_t kp, uint32_t* scratch) {
  if (p.packed && nc0 % kDotNR == 0) return p.packed->panel(nc0 / kDotNR);
  pack_block(p, nc0, nc, kp, scratch);
  return scratch;
}

// All of W into PackedLinearWeights' layout (the table's pack_bf16).
void pack_all_bf16(const LinearProblem& p, uint32_t* out) {
  const int64_t kp = panel_pairs(p.k);
  for (int64_t c = 0; c < p.n; c += 1024) pack_block(p, c, std::min<int64_t>(1024, p.n - c), kp, out + c / kDotNR * kp * kDotNR);
}

// Rows [m0, m1), columns [n0, n1) of y for bf16 W (either layout).
void dot_gemm(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const int64_t kp = panel_pairs(p.k), ldb = round_up32(p.k), lda32 = ldb / 2;
  uint16_t* x16 = x_scratch(m1 - m0, ldb);
  x_to_bf16(p, m0, m1 - m0, x16, ldb);
  const uint32_t* xb = reinterpret_cast<const uint32_t*>(x16);
  const int64_t nc_max = pack_block_cols(kp);
  uint32_t* scratch = reinterpret_cast<uint32_t*>(thread_scratch(0, static_cast<size_t>(nc_max * kp)));
  for (int64_t nc0 = n0; nc0 < n1; nc0 += nc_max) {
    const int64_t nc = std::min(nc_max, n1 - nc0);
    const int64_t panels = (nc + kDotNR - 1) / kDotNR;
    const uint32_t* bp = block_panels(p, nc0, nc, kp, scratch);
    for (int64_t q0 = 0; q0 < kp; q0 += kDotKCP) {
      const int64_t kcp = std::min(kDotKCP, kp - q0);
      const bool accumulate = q0 > 0;
      for (int64_t mc0 = m0; mc0 < m1; mc0 += kDotMC) {
        const int64_t mc1 = std::min(m1, mc0 + kDotMC);
        for (int64_t pn = 0; pn < panels; ++pn) {
          const int64_t col = nc0 + pn * kDotNR;
          const int ncols = static_cast<int>(std::min(kDotNR, nc0 + nc - col));
          const int nv = (ncols + 15) / 16;
          const float* bias = !accumulate && p.bias ? p.bias + col : nullptr;
          const uint32_t* b = bp + pn * kp * kDotNR + q0 * kDotNR;
          for (int64_t i = mc0; i < mc1; i += kDotMR) {
            const int mr = static_cast<int>(std::min<int64_t>(kDotMR, mc1 - i));
            dot_micro_any(nv, mr, kcp, xb + (i - m0) * lda32 + q0, lda32, b, p.y + i * p.ldy + col, p.ldy,
                          ncols, accumulate, bias);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------- entries

void gemv_bf16dot(const LinearProblem& p, int64_t n0, int64_t n1) {
  if (p.w_dtype != DType::bf16) return gemv_entry<Isa::avx512>(p, n0, n1);
  if (p.w_layout == WeightLayout::kn) return dot_gemm(p, 0, p.m, n0, n1);  // pairs need packing
  const int64_t ldb = round_up32(p.k);
  uint16_t* xb = x_scratch(p.m, ldb);
  x_to_bf16(p, 0, p.m, xb, ldb);
  for (int64_t m0 = 0; m0 < p.m; m0 += kGemvRows) {
    const uint16_t* xr = xb + m0 * ldb;
    switch (std::min<int64_t>(kGemvRows, p.m - m0)) {
      case 1: dot_gemv_rows<1>(p, m0, n0, n1, xr, ldb); break;
      case 2: dot_gemv_rows<2>(p, m0, n0, n1, xr, ldb); break;
      case 3: dot_gemv_rows<3>(p, m0, n0, n1, xr, ldb); break;
      case 4: dot_gemv_rows<4>(p, m0, n0, n1, xr, ldb); break;
      case 5: dot_gemv_rows<5>(p, m0, n0, n1, xr, ldb); break;
      case 6: dot_gemv_rows<6>(p, m0, n0, n1, xr, ldb); break;
      case 7: dot_gemv_rows<7>(p, m0, n0, n1, xr, ldb); break;
      default: dot_gemv_rows<8>(p, m0, n0, n1, xr, ldb); break;
    }
  }
}

void gemm_bf16dot(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (p.w_dtype != DType::bf16) return gemm_entry<Isa::avx512>(p, m0, m1, n0, n1);
  dot_gemm(p, m0, m1, n0, n1);
}

static_assert(kDotNR == LinearTuning<Isa::avx512>::NV * 16 && kDotMR == LinearTuning<Isa::avx512>::MR,
              "linear.cc splits work by the table's panel sizes, shared by both dtypes' paths");

}  // namespace
}  // namespace fuselm::kernels
