// linear kernel bodies, written once over Vec<Isa>, and the per-ISA table (internal). linear.cc
// includes it for the generic table; CMake writes the other levels' tables from the line below.
// Includes nothing but the bf16 and AMX bodies of the levels that have those features (see the
// ODR rule in simd.h).
// isa-table: LinearKernels make_linear_kernels avx2 avx512 avx512bf16 amx
//
// GEMV (decode): each pass takes up to 8 rows of x and streams W once.
//   nk: NB rows of W at a time, NB×M vector accumulators, horizontal sums at the end; bf16 loads
//       2·W weights per vector and splits even/odd elements (x deinterleaved once per call). Or,
//       at one row of x where CpuTuning::gemv_memory_order says so, one W row at a time (W read
//       front to back as one stream), four partial sums per row.
//   kn: a block of columns kept in M×NV vector accumulators over a strip of KB rows of W, partial
//       sums kept in y between strips (so a strip reads KB short contiguous row segments).
// GEMM (prefill): BLIS-style loops nc → kc → mc → panel → MR rows. For a block of nc columns all
// of W[:, nc] is packed once to fp32 panels bp[k][NR] (~1 MiB, L2; nk is transposed W×W block by
// W×W block in registers, reading 16 W rows front to back); the MR×NR micro-kernel broadcasts x
// from its rows (no packing of x) and keeps MR×NV accumulators in registers over kc.
namespace fuselm::kernels {
namespace {  // NOLINT

template <Isa I>
struct LinearTuning;
template <>
struct LinearTuning<Isa::generic> {
  static constexpr int MR = 4, NV = 4;
  static constexpr int64_t KC = 256, MC = 256, NC = 512;
  static constexpr int gemv_nb(int m) { return m == 1 ? 4 : m <= 4 ? 2 : 1; }
  static constexpr int gemv_kn_nv(int m) { return m <= 2 ? 8 : m <= 4 ? 4 : 2; }
};
template <>
struct LinearTuning<Isa::avx2> {
  static constexpr int MR = 6, NV = 2;
  static constexpr int64_t KC = 256, MC = 384, NC = 1024;
  static constexpr int gemv_nb(int m) { return m == 1 ? 8 : m == 2 ? 6 : m <= 4 ? 4 : 2; }
  static constexpr int gemv_kn_nv(int m) { return m == 1 ? 8 : m == 2 ? 4 : m <= 4 ? 2 : 1; }
};
template <>
struct LinearTuning<Isa::avx512> {
  static constexpr int MR = 6, NV = 4;
  static constexpr int64_t KC = 128, MC = 480, NC = 1024;
  // W rows in flight matter more than register pressure (measured: m = 8 with 4 rows beats 2
  // rows although 32 accumulators spill x to memory operands)
  static constexpr int gemv_nb(int m) { return m <= 2 ? 8 : m <= 4 ? 6 : 4; }
  static constexpr int gemv_kn_nv(int m) { return m <= 2 ? 8 : m <= 4 ? 4 : 2; }
};

// Loads W weights of storage dtype D as fp32 (n < W: the first n, others zero).
template <class V, DType D>
FUSELM_INLINE typename V::R load_w(const void* p) {
  if constexpr (D == DType::f32) return V::load(static_cast<const float*>(p));
  if constexpr (D == DType::bf16) return V::load_bf16(static_cast<const uint16_t*>(p));
  if constexpr (D == DType::f16) return V::load_f16(static_cast<const uint16_t*>(p));
}
template <class V, DType D>
FUSELM_INLINE typename V::R loadn_w(const void* p, int n) {
  if constexpr (D == DType::f32) return V::loadn(static_cast<const float*>(p), n);
  if constexpr (D == DType::bf16) return V::loadn_bf16(static_cast<const uint16_t*>(p), n);
  if constexpr (D == DType::f16) return V::loadn_f16(static_cast<const uint16_t*>(p), n);
}

inline int clamp_lanes(int64_t n, int w) { return static_cast<int>(n <= 0 ? 0 : n >= w ? w : n); }

template <DType D>
FUSELM_INLINE const void* w_at(const void* w, int64_t i) {
  return static_cast<const char*>(w) + i * dtype_size(D);
}

// Whether p.packed is an f32 W packed for this path's panels (PackedLinearWeights, f32 layout).
template <Isa I, DType D>
FUSELM_INLINE bool uses_packed_f32(const LinearProblem& p) {
  if constexpr (D != DType::f32) {
    return false;
  } else {
    constexpr int64_t NR = LinearTuning<I>::NV * Vec<I>::W;
    return p.packed && p.packed->dtype() == DType::f32 && p.packed->nr() == NR;
  }
}

// ---------------------------------------------------------------------------------------- GEMV

template <Isa I, DType D, int M, int NB>
FUSELM_INLINE void gemv_nk_block(const LinearProblem& p, int64_t m0, int64_t j0) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const float* x = p.x + m0 * p.lda;
  const void* w = w_at<D>(p.w, j0 * p.ldw);
  R acc[NB][M];
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) acc[j][i] = V::zero();
  }
  const int64_t k = p.k, kfull = k - k % W;
  for (int64_t kk = 0; kk < kfull; kk += W) {
    R xv[M];
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) xv[i] = V::load(x + i * p.lda + kk);
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      const R wv = load_w<V, D>(w_at<D>(w, j * p.ldw + kk));
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i) acc[j][i] = V::fma(wv, xv[i], acc[j][i]);
    }
  }
  if (kfull < k) {
    const int rem = static_cast<int>(k - kfull);
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      const R wv = loadn_w<V, D>(w_at<D>(w, j * p.ldw + kfull), rem);
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i)
        acc[j][i] = V::fma(wv, V::loadn(x + i * p.lda + kfull, rem), acc[j][i]);
    }
  }
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    const float b = p.bias ? p.bias[j0 + j] : 0.f;
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) p.y[(m0 + i) * p.ldy + j0 + j] = V::hsum(acc[j][i]) + b;
  }
}

// bf16 variant of gemv_nk_block: a full vector load brings 2·W weights, split into even and odd
// elements with one shift and one and (no widening shuffle), against x deinterleaved the same way:
// xd holds, per block of 2·W columns, the W even columns then the W odd ones (row stride ldxd).
// Each load prefetches the same line of the next block into L2, as dot_gemv_block does.
template <Isa I, int M, int NB>
FUSELM_INLINE void gemv_nk_block_bf16(const LinearProblem& p, int64_t m0, int64_t j0,
                                      const float* xd, int64_t ldxd) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const uint16_t* w = static_cast<const uint16_t*>(p.w) + j0 * p.ldw;
  R acc[NB][M];
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) acc[j][i] = V::zero();
  }
  const int64_t k = p.k, kpairs = k - k % (2 * W);
  for (int64_t kk = 0; kk < kpairs; kk += 2 * W) {
    R xe[M], xo[M];
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) {
      xe[i] = V::load(xd + i * ldxd + kk);
      xo[i] = V::load(xd + i * ldxd + kk + W);
    }
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      R we, wo;
      V::load_bf16_pairs(w + j * p.ldw + kk, we, wo);
      if constexpr (W >= 8) FUSELM_PREFETCH_L2(w + (j + NB) * p.ldw + kk);  // the next block's line
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i) acc[j][i] = V::fma(wo, xo[i], V::fma(we, xe[i], acc[j][i]));
    }
  }
  for (int64_t kk = kpairs; kk < k; kk += W) {  // tail: plain order, x itself
    const int rem = clamp_lanes(k - kk, W);
    FUSELM_UNROLL(8)
    for (int j = 0; j < NB; ++j) {
      const R wv = V::loadn_bf16(w + j * p.ldw + kk, rem);
      FUSELM_UNROLL(8)
      for (int i = 0; i < M; ++i)
        acc[j][i] = V::fma(wv, V::loadn(p.x + (m0 + i) * p.lda + kk, rem), acc[j][i]);
    }
  }
  FUSELM_UNROLL(8)
  for (int j = 0; j < NB; ++j) {
    const float b = p.bias ? p.bias[j0 + j] : 0.f;
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) p.y[(m0 + i) * p.ldy + j0 + j] = V::hsum(acc[j][i]) + b;
  }
}

// Memory-order variant (LinearProblem::gemv_memory_order), one row of x: one W row at a time, so
// that a thread reads its share of W front to back as one stream; kRowSums partial sums cover the
// FMA latency that the NB rows of gemv_nk_block cover otherwise. bf16 weights are widened per vector.
constexpr int kRowSums = 4;

template <Isa I, DType D>
FUSELM_INLINE void gemv_nk_row(const LinearProblem& p, int64_t m0, int64_t j) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W, U = kRowSums;
  const float* x = p.x + m0 * p.lda;
  const void* w = w_at<D>(p.w, j * p.ldw);
  R acc[U] = {V::zero(), V::zero(), V::zero(), V::zero()};
  const int64_t k = p.k, kfull = k - k % (U * W);
  const char* ahead = static_cast<const char*>(w) + p.gemv_prefetch;
  int64_t kk = 0;
  for (; kk < kfull; kk += U * W) {
    if constexpr (D != DType::f32) {  // 2-byte weights: the lines U·W of them span (W rows are contiguous)
      if (p.gemv_prefetch > 0)
        for (int64_t b = 0; b < U * W * 2; b += 64) FUSELM_PREFETCH_L2(ahead + kk * 2 + b);
    }
    FUSELM_UNROLL(4)
    for (int u = 0; u < U; ++u) acc[u] = V::fma(load_w<V, D>(w_at<D>(w, kk + u * W)), V::load(x + kk + u * W), acc[u]);
  }
  for (; kk < k; kk += W) {
    const int rem = clamp_lanes(k - kk, W);
    acc[0] = V::fma(loadn_w<V, D>(w_at<D>(w, kk), rem), V::loadn(x + kk, rem), acc[0]);
  }
  const float b = p.bias ? p.bias[j] : 0.f;
  p.y[m0 * p.ldy + j] = V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3]))) + b;
}

// Memory-order variant over S rows at once: rows j, j + part, ..., j + (S-1)·part, one cache line
// of each in turn (CpuTuning::gemv_streams). Each row is still read front to back; S of them far
// apart keep S prefetch streams and DRAM pages busy where one stream leaves bandwidth unused.
template <Isa I, DType D, int S>
FUSELM_INLINE void gemv_nk_row_streams(const LinearProblem& p, int64_t m0, int64_t j, int64_t part) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int64_t kLine = 64 / static_cast<int64_t>(dtype_size(D));
  constexpr int64_t STEP = kLine > W ? kLine : W;  // elements of one row per step: a line or a vector
  constexpr int VS = static_cast<int>(STEP / W);  // vectors per step
  constexpr int A = VS < (8 + S - 1) / S ? VS : (8 + S - 1) / S;  // accumulators per row
  const float* x = p.x + m0 * p.lda;
  const char* w[S];
  R acc[S][A];
  FUSELM_UNROLL(8)
  for (int s = 0; s < S; ++s) {
    w[s] = static_cast<const char*>(w_at<D>(p.w, (j + s * part) * p.ldw));
    FUSELM_UNROLL(8)
    for (int a = 0; a < A; ++a) acc[s][a] = V::zero();
  }
  const int64_t k = p.k, kfull = k - k % STEP;
  int64_t kk = 0;
  for (; kk < kfull; kk += STEP) {
    R xv[VS];
    FUSELM_UNROLL(8)
    for (int u = 0; u < VS; ++u) xv[u] = V::load(x + kk + u * W);
    FUSELM_UNROLL(8)
    for (int s = 0; s < S; ++s) {
      const char* ws = w[s] + kk * static_cast<int64_t>(dtype_size(D));
      if constexpr (D != DType::f32)  // as gemv_nk_row: f32 rows stream as fast without
        if (p.gemv_prefetch > 0) FUSELM_PREFETCH_L2(ws + p.gemv_prefetch);
      FUSELM_UNROLL(8)
      for (int u = 0; u < VS; ++u) acc[s][u % A] = V::fma(load_w<V, D>(w_at<D>(ws, u * W)), xv[u], acc[s][u % A]);
    }
  }
  for (; kk < k; kk += W) {
    const int rem = clamp_lanes(k - kk, W);
    const R xv = V::loadn(x + kk, rem);
    FUSELM_UNROLL(8)
    for (int s = 0; s < S; ++s) acc[s][0] = V::fma(loadn_w<V, D>(w_at<D>(w[s], kk), rem), xv, acc[s][0]);
  }
  FUSELM_UNROLL(8)
  for (int s = 0; s < S; ++s) {
    R t = acc[s][0];
    FUSELM_UNROLL(8)
    for (int a = 1; a < A; ++a) t = V::add(t, acc[s][a]);
    const int64_t row = j + s * part;
    p.y[m0 * p.ldy + row] = V::hsum(t) + (p.bias ? p.bias[row] : 0.f);
  }
}

// Rows [n0, n1) at one row of x in memory order, S streams (gemv_nk_row_streams); the rows left
// over after S equal parts one at a time.
template <Isa I, DType D, int S>
void gemv_nk_streams(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1) {
  const int64_t part = (n1 - n0) / S;
  for (int64_t j = n0; j < n0 + part; ++j) gemv_nk_row_streams<I, D, S>(p, m0, j, part);
  for (int64_t j = n0 + S * part; j < n1; ++j) gemv_nk_row<I, D>(p, m0, j);
}

template <Isa I, DType D, int M>
void gemv_nk(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NB = LinearTuning<I>::gemv_nb(M);
  int64_t j = n0;
  if constexpr (M == 1) {  // batched decode keeps interleaving (CpuTuning::gemv_memory_order)
    if (p.gemv_memory_order) {
      switch (p.gemv_streams) {
        case 2: return gemv_nk_streams<I, D, 2>(p, m0, n0, n1);
        case 4: return gemv_nk_streams<I, D, 4>(p, m0, n0, n1);
        case 8: return gemv_nk_streams<I, D, 8>(p, m0, n0, n1);
        default: break;
      }
      for (; j < n1; ++j) gemv_nk_row<I, D>(p, m0, j);
      return;
    }
  }
  if constexpr (D == DType::bf16) {
    constexpr int W2 = 2 * Vec<I>::W;
    const int64_t kpairs = p.k - p.k % W2;
    float* xd = thread_scratch(1, static_cast<size_t>(M * kpairs + 1));
    for (int i = 0; i < M; ++i) {
      const float* xr = p.x + (m0 + i) * p.lda;
      float* dr = xd + i * kpairs;
      for (int64_t kk = 0; kk < kpairs; kk += W2)
        for (int e = 0; e < W2 / 2; ++e) {
          dr[kk + e] = xr[kk + 2 * e];
          dr[kk + W2 / 2 + e] = xr[kk + 2 * e + 1];
        }
    }
    for (; j + NB <= n1; j += NB) gemv_nk_block_bf16<I, M, NB>(p, m0, j, xd, kpairs);
    for (; j < n1; ++j) gemv_nk_block_bf16<I, M, 1>(p, m0, j, xd, kpairs);
  } else {
    for (; j + NB <= n1; j += NB) gemv_nk_block<I, D, M, NB>(p, m0, j);
    for (; j < n1; ++j) gemv_nk_block<I, D, M, 1>(p, m0, j);
  }
}

// Columns [c0, c0 + ncols) (ncols <= NV*W) of rows m0..m0+M, rows [kb0, kb1) of a [k, n] W.
template <Isa I, DType D, int M, int NV>
FUSELM_INLINE void gemv_kn_block(const LinearProblem& p, int64_t m0, int64_t c0, int ncols,
                                 int64_t kb0, int64_t kb1) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const bool full = ncols == NV * W;
  R acc[M][NV];
  FUSELM_UNROLL(8)
  for (int i = 0; i < M; ++i) {
    float* yr = p.y + (m0 + i) * p.ldy + c0;
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      const int cnt = clamp_lanes(ncols - v * W, W);
      if (kb0 > 0)
        acc[i][v] = full ? V::load(yr + v * W) : V::loadn(yr + v * W, cnt);
      else if (p.bias)
        acc[i][v] = full ? V::load(p.bias + c0 + v * W) : V::loadn(p.bias + c0 + v * W, cnt);
      else
        acc[i][v] = V::zero();
    }
  }
  for (int64_t kk = kb0; kk < kb1; ++kk) {
    const void* wr = w_at<D>(p.w, kk * p.ldw + c0);
    R wv[NV];
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v)
      wv[v] = full ? load_w<V, D>(w_at<D>(wr, v * W))
                   : loadn_w<V, D>(w_at<D>(wr, v * W), clamp_lanes(ncols - v * W, W));
    FUSELM_UNROLL(8)
    for (int i = 0; i < M; ++i) {
      const R xb = V::set1(p.x[(m0 + i) * p.lda + kk]);
      FUSELM_UNROLL(8)
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(xb, wv[v], acc[i][v]);
    }
  }
  FUSELM_UNROLL(8)
  for (int i = 0; i < M; ++i) {
    float* yr = p.y + (m0 + i) * p.ldy + c0;
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      if (full)
        V::store(yr + v * W, acc[i][v]);
      else
        V::storen(yr + v * W, acc[i][v], clamp_lanes(ncols - v * W, W));
    }
  }
}

template <Isa I, DType D, int M>
void gemv_kn(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int NV = LinearTuning<I>::gemv_kn_nv(M);
  constexpr int64_t NW = NV * Vec<I>::W;
  constexpr int64_t KB = 32;  // W rows per strip: KB short streams at a time
  for (int64_t kb0 = 0; kb0 < p.k; kb0 += KB) {
    const int64_t kb1 = std::min(p.k, kb0 + KB);
    for (int64_t c = n0; c < n1; c += NW)
      gemv_kn_block<I, D, M, NV>(p, m0, c, static_cast<int>(std::min(NW, n1 - c)), kb0, kb1);
  }
}

template <Isa I, DType D, int M>
void gemv_rows(const LinearProblem& p, int64_t m0, int64_t n0, int64_t n1) {
  if (p.w_layout == WeightLayout::nk)
    gemv_nk<I, D, M>(p, m0, n0, n1);
  else
    gemv_kn<I, D, M>(p, m0, n0, n1);
}

template <Isa I, DType D>
void gemv_dtype(const LinearProblem& p, int64_t n0, int64_t n1) {
  if constexpr (I == Isa::generic) {  // the portable path: fewer instantiations, same results
    int64_t m0 = 0;
    for (; m0 + 4 <= p.m; m0 += 4) gemv_rows<I, D, 4>(p, m0, n0, n1);
    for (; m0 < p.m; ++m0) gemv_rows<I, D, 1>(p, m0, n0, n1);
  } else {
    for (int64_t m0 = 0; m0 < p.m; m0 += kGemvRows) {
      switch (std::min<int64_t>(kGemvRows, p.m - m0)) {
        case 1: gemv_rows<I, D, 1>(p, m0, n0, n1); break;
        case 2: gemv_rows<I, D, 2>(p, m0, n0, n1); break;
        case 3: gemv_rows<I, D, 3>(p, m0, n0, n1); break;
        case 4: gemv_rows<I, D, 4>(p, m0, n0, n1); break;
        case 5: gemv_rows<I, D, 5>(p, m0, n0, n1); break;
        case 6: gemv_rows<I, D, 6>(p, m0, n0, n1); break;
        case 7: gemv_rows<I, D, 7>(p, m0, n0, n1); break;
        default: gemv_rows<I, D, 8>(p, m0, n0, n1); break;
      }
    }
  }
}

template <Isa I>
void gemv_entry(const LinearProblem& p, int64_t n0, int64_t n1) {
  switch (p.w_dtype) {
    case DType::f32: return gemv_dtype<I, DType::f32>(p, n0, n1);
    case DType::bf16: return gemv_dtype<I, DType::bf16>(p, n0, n1);
    case DType::f16: return gemv_dtype<I, DType::f16>(p, n0, n1);
  }
}

// ---------------------------------------------------------------------------------------- GEMM

// Packs columns [nb, nb + NR) ∩ [., n_end) of W, rows [k0, k0 + kc), as fp32 bp[k][NR]; columns
// at or past n_end are zero.
template <Isa I, DType D>
void pack_panel_nk(const LinearProblem& p, int64_t nb, int64_t n_end, int64_t k0, int64_t kc,
                   float* bp) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int NR = LinearTuning<I>::NV * W;
  for (int jb = 0; jb < NR; jb += W) {
    const int valid = clamp_lanes(n_end - (nb + jb), W);
    for (int64_t kb = 0; kb < kc; kb += W) {
      const int kn = clamp_lanes(kc - kb, W);
      R r[W];
      FUSELM_UNROLL(16)
      for (int i = 0; i < W; ++i) {
        const void* src = w_at<D>(p.w, (nb + jb + i) * p.ldw + k0 + kb);
        r[i] = i >= valid ? V::zero() : kn == W ? load_w<V, D>(src) : loadn_w<V, D>(src, kn);
      }
      V::transpose(r);
      float* dst = bp + kb * NR + jb;
      if (kn == W) {
        FUSELM_UNROLL(16)
        for (int kk = 0; kk < W; ++kk) V::store(dst + kk * NR, r[kk]);
      } else {
        for (int kk = 0; kk < kn; ++kk) V::store(dst + kk * NR, r[kk]);
      }
    }
  }
}

template <Isa I, DType D>
void pack_panel_kn(const LinearProblem& p, int64_t nb, int64_t n_end, int64_t k0, int64_t kc,
                   float* bp) {
  using V = Vec<I>;
  constexpr int W = V::W;
  constexpr int NV = LinearTuning<I>::NV;
  constexpr int NR = NV * W;
  int cnt[NV];
  for (int v = 0; v < NV; ++v) cnt[v] = clamp_lanes(n_end - (nb + v * W), W);
  for (int64_t k = 0; k < kc; ++k) {
    const void* src = w_at<D>(p.w, (k0 + k) * p.ldw + nb);
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      const void* s = w_at<D>(src, v * W);
      V::store(bp + k * NR + v * W, cnt[v] == W ? load_w<V, D>(s) : loadn_w<V, D>(s, cnt[v]));
    }
  }
}

// c[MR, ncols] (+)= a[MR, kc] · bp[kc, NV*W]; a rows at stride lda; the first nv vectors of each
// bp row are used. Starts from c (accumulate), else from bias (if any), else zero.
template <Isa I, int MR, int NV>
void micro_kernel(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                  int ncols, bool accumulate, const float* bias) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  constexpr int NR = LinearTuning<I>::NV * W;
  R acc[MR][NV];
  FUSELM_UNROLL(8)
  for (int i = 0; i < MR; ++i) {
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  }
  const float* ar[MR];
  FUSELM_UNROLL(8)
  for (int i = 0; i < MR; ++i) ar[i] = a + i * lda;
  for (int64_t k = 0; k < kc; ++k) {
    R b[NV];
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) b[v] = V::load(bp + k * NR + v * W);
    FUSELM_UNROLL(8)
    for (int i = 0; i < MR; ++i) {
      const R ai = V::set1(ar[i][k]);
      FUSELM_UNROLL(8)
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(ai, b[v], acc[i][v]);
    }
  }
  const bool full = ncols == NV * W;
  FUSELM_UNROLL(8)
  for (int i = 0; i < MR; ++i) {
    float* cr = c + i * ldc;
    FUSELM_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      if (full) {
        const R base = accumulate ? V::load(cr + v * W) : bias ? V::load(bias + v * W) : V::zero();
        V::store(cr + v * W, V::add(acc[i][v], base));
      } else {
        const int cnt = clamp_lanes(ncols - v * W, W);
        if (cnt == 0) continue;
        const R base = accumulate ? V::loadn(cr + v * W, cnt)
                       : bias     ? V::loadn(bias + v * W, cnt)
                                  : V::zero();
        V::storen(cr + v * W, V::add(acc[i][v], base), cnt);
      }
    }
  }
}

template <Isa I, int NV>
void micro_rows(int mr, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
                int64_t ldc, int ncols, bool accumulate, const float* bias) {
  constexpr int MR = LinearTuning<I>::MR;
  static_assert(MR <= 6);
  switch (mr) {
    case 1: return micro_kernel<I, 1, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
    case 2: return micro_kernel<I, 2, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
    case 3: return micro_kernel<I, 3, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
    case 4: return micro_kernel<I, 4, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
    case 5:
      if constexpr (MR >= 5)
        return micro_kernel<I, 5, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
      break;
    case 6:
      if constexpr (MR >= 6)
        return micro_kernel<I, 6, NV>(kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
      break;
  }
}

template <Isa I, int NV = LinearTuning<I>::NV>
void micro_any(int nv, int mr, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
               int64_t ldc, int ncols, bool accumulate, const float* bias) {
  if constexpr (NV > 1) {
    if (nv < NV) return micro_any<I, NV - 1>(nv, mr, kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
  }
  micro_rows<I, NV>(mr, kc, a, lda, bp, c, ldc, ncols, accumulate, bias);
}

// All of an f32 W as PackedLinearWeights' f32 panels (the table's pack_f32).
template <Isa I>
void pack_all_f32(const LinearProblem& p, float* out) {
  constexpr int64_t NR = LinearTuning<I>::NV * Vec<I>::W;
  for (int64_t nb = 0; nb < p.n; nb += NR) {
    if (p.w_layout == WeightLayout::nk)
      pack_panel_nk<I, DType::f32>(p, nb, p.n, 0, p.k, out + nb / NR * p.k * NR);
    else
      pack_panel_kn<I, DType::f32>(p, nb, p.n, 0, p.k, out + nb / NR * p.k * NR);
  }
}

template <Isa I, DType D>
void gemm_dtype(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  using T = LinearTuning<I>;
  constexpr int W = Vec<I>::W;
  constexpr int64_t NR = T::NV * W;
  // Columns per packed block: all of K for NC columns in about kPackBytes (L2), so that packing
  // reads each W row once, front to back (nk: 16 rows at a time).
  constexpr int64_t kPackBytes = int64_t{1} << 20;
  const int64_t nc_max = std::clamp<int64_t>(kPackBytes / (4 * p.k) / NR * NR, NR, T::NC);
  // W packed at load (f32, this path's panels; linear.cc splits columns on whole panels) is read
  // in place: no packing, and the next k block of panels is prefetched while this one computes.
  const bool pre = uses_packed_f32<I, D>(p) && n0 % NR == 0;
  float* scratch = pre ? nullptr : thread_scratch(0, static_cast<size_t>(nc_max * p.k));
  for (int64_t nc0 = n0; nc0 < n1; nc0 += nc_max) {
    const int64_t nc = std::min(nc_max, n1 - nc0);
    const int64_t panels = (nc + NR - 1) / NR;
    const float* bp = pre ? p.packed->panel_f32(nc0 / NR) : scratch;
    for (int64_t pn = 0; pn < panels && !pre; ++pn) {
      if (p.w_layout == WeightLayout::nk)
        pack_panel_nk<I, D>(p, nc0 + pn * NR, nc0 + nc, 0, p.k, scratch + pn * p.k * NR);
      else
        pack_panel_kn<I, D>(p, nc0 + pn * NR, nc0 + nc, 0, p.k, scratch + pn * p.k * NR);
    }
    for (int64_t kc0 = 0; kc0 < p.k; kc0 += T::KC) {
      const int64_t kc = std::min(T::KC, p.k - kc0);
      const bool accumulate = kc0 > 0;
      for (int64_t mc0 = m0; mc0 < m1; mc0 += T::MC) {
        const int64_t mc1 = std::min(m1, mc0 + T::MC);
        for (int64_t pn = 0; pn < panels; ++pn) {
          const int64_t col = nc0 + pn * NR;
          const int ncols = static_cast<int>(std::min(NR, nc0 + nc - col));
          const int nv = (ncols + W - 1) / W;
          const float* bias = !accumulate && p.bias ? p.bias + col : nullptr;
          const float* b = bp + pn * p.k * NR + kc0 * NR;
          // Packed at load, W comes from DRAM the first time a row block reads it: the block
          // read next (the next panel's, else the first panel's next k block) is prefetched a few
          // lines per micro-tile over the first row block, while this one computes from cache.
          const float* next = nullptr;
          int64_t next_rows = 0;
          if (pre && mc0 == m0) {
            if (pn + 1 < panels) {
              next = b + p.k * NR;
              next_rows = kc;
            } else if (kc0 + T::KC < p.k) {
              next = bp + (kc0 + T::KC) * NR;
              next_rows = std::min(T::KC, p.k - kc0 - T::KC);
            }
          }
          const int64_t next_lines = next_rows * NR / 16;  // 64-byte lines
          const int64_t per_tile = next_lines * T::MR / (mc1 - mc0) + 1;
          int64_t line = 0;
          for (int64_t i = mc0; i < mc1; i += T::MR) {
            const int mr = static_cast<int>(std::min<int64_t>(T::MR, mc1 - i));
            for (const int64_t e = line + per_tile; line < e && line < next_lines; ++line)
              __builtin_prefetch(next + line * 16, 0, 3);
            micro_any<I>(nv, mr, kc, p.x + i * p.lda + kc0, p.lda, b, p.y + i * p.ldy + col,
                         p.ldy, ncols, accumulate, bias);
          }
        }
      }
    }
  }
}

template <Isa I>
void gemm_entry(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  switch (p.w_dtype) {
    case DType::f32: return gemm_dtype<I, DType::f32>(p, m0, m1, n0, n1);
    case DType::bf16: return gemm_dtype<I, DType::bf16>(p, m0, m1, n0, n1);
    case DType::f16: return gemm_dtype<I, DType::f16>(p, m0, m1, n0, n1);
  }
}

template <Isa I>
constexpr LinearKernels make_vec_linear_kernels() {
  return {&gemv_entry<I>, &gemm_entry<I>, LinearTuning<I>::NV * Vec<I>::W, LinearTuning<I>::MR, nullptr, nullptr,
          &pack_all_f32<I>};
}

}  // namespace
}  // namespace fuselm::kernels

// Levels with AVX512_BF16: bf16 weights through vdpbf16ps (linear_bf16dot_impl.h) and, with AMX,
// bf16 GEMM on tiles (linear_amx_impl.h); every other dtype through the avx512 bodies above, so
// f32 weights packed at load are avx512's panels. Only the files compiled for such a level (CMake
// defines FUSELM_ISA_HAS_<FEATURE> there) see those bodies: elsewhere the compiler may not emit them.
#if FUSELM_ISA_HAS_AVX512BF16
#include "kernels/cpu/linear_bf16dot_impl.h"
#endif
#if FUSELM_ISA_HAS_AMX_BF16
#include "kernels/cpu/linear_amx_impl.h"
#endif

namespace fuselm::kernels {
namespace {  // NOLINT

template <Isa I>
constexpr LinearKernels make_linear_kernels() {
#if FUSELM_ISA_HAS_AMX_BF16
  static_assert(isa_has(I, "amx-bf16"));
  // GEMV (decode) keeps the avx512 widening path: on Sapphire Rapids vdpbf16ps GEMV measured no
  // faster at one row (memory-bound) and slower at 4 rows than widening plus two FMAs.
  return {&gemv_entry<Isa::avx512>, &gemm_amx, kDotNR, kDotMR, &pack_all_bf16, &panel_pairs, &pack_all_f32<Isa::avx512>};
#elif FUSELM_ISA_HAS_AVX512BF16
  static_assert(isa_has(I, "avx512bf16") && !isa_has(I, "amx-bf16"));
  return {&gemv_bf16dot, &gemm_bf16dot, kDotNR, kDotMR, &pack_all_bf16, &panel_pairs, &pack_all_f32<Isa::avx512>};
#else
  static_assert(!isa_has(I, "avx512bf16"), "a bf16 level's file defines FUSELM_ISA_HAS_AVX512BF16");
  return make_vec_linear_kernels<I>();
#endif
}

}  // namespace
}  // namespace fuselm::kernels
