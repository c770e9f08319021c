// The recurrent kernels' inner bodies over Vec<Isa> and their per-ISA table (internal).
// recurrent.cc includes it for the generic table; CMake writes the avx2 and avx512 tables from the
// line below. The bodies are the hot loops: one token of a head (decode) and the small matrix
// products of a chunk (prefill); recurrent.cc orders them.
// isa-table: RecurrentKernels make_recurrent_kernels avx2 avx512
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd_math.h"

namespace fuselm::kernels {

/// Per-ISA table of the recurrent bodies (recurrent.cc). All pointers f32, rows unit-stride.
struct RecurrentKernels {
  /// C[M×N] (+)= A[M×K]·B[K×N]; row strides lda, ldb, ldc; acc: add to C instead of writing it.
  void (*gemm)(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t k,
               int64_t n, bool acc);
  /// One SSD token of one head: S[P][N] <- dA·S + (dt·x[p])·B; y[p] = S[p]·C + d·x[p].
  void (*ssd_step)(float* s, const float* x, const float* b, const float* c, float* y, int64_t p, int64_t n, float da,
                   float dt, float d);
  /// One selective-scan token of one channel: S[N] <- exp(dt·A)·S + (dt·x)·B; returns S·C.
  float (*selective_step)(float* s, const float* a, const float* b, const float* c, int64_t n, float dt, float x);
  /// One delta-rule token of one head: S[Dk][Dv] <- diag(e)·S (e: decay[i], or decay_all when decay
  /// is null); S <- S + k ⊗ beta·(v - Sᵀk); o = Sᵀq.
  void (*delta_step)(float* s, const float* q, const float* k, const float* v, const float* decay, float decay_all,
                     float beta, float* o, int64_t dk, int64_t dv);
  /// Σ_i a[i]·b[i]·exp(ga[i] - gb[i]) over n channels (the per-channel decayed dot of a chunk).
  float (*decayed_dot)(const float* a, const float* b, const float* ga, const float* gb, int64_t n);
  /// One token of the depthwise conv over n channels: out[c] = act(bias[c] + Σ_j wt[j·ldw + c]·in[j][c])
  /// for j < k (bias may be null; act: silu or the identity).
  void (*conv_rows)(const float* const* in, int64_t k, const float* wt, int64_t ldw, const float* bias, float* out,
                    int64_t n, bool silu);
  /// x[i] <- exp(x[i]) over n floats.
  void (*exp_inplace)(float* x, int64_t n);
  /// out[i] = f·a[i]·b[i] (f·a[i] when b is null) over n floats; out may be a.
  void (*scale_mul)(const float* a, const float* b, float f, float* out, int64_t n);
  /// Σ a[i]·b[i] over n floats.
  float (*dot)(const float* a, const float* b, int64_t n);
  /// x[i] <- softplus(x[i]) (torch's: x above 20 kept) over n floats.
  void (*softplus_inplace)(float* x, int64_t n);
  /// x[i] <- silu(x[i]) over n floats.
  void (*silu_inplace)(float* x, int64_t n);
  /// `tokens` steps of the linear scan over n channels: h[c] <- a[t][c]·h[c] + b[t][c], out[t][c] =
  /// h[c] (token strides a_t, b_t, o_t).
  void (*linear_rows)(float* h, const float* a, int64_t a_t, const float* b, int64_t b_t, float* out, int64_t o_t,
                      int64_t tokens, int64_t n);
};

extern const RecurrentKernels kRecurrentKernelsGeneric;
/// The table of the path in use (recurrent.cc, where the per-level tables are declared).
const RecurrentKernels& recurrent_kernels();

namespace {  // NOLINT

// The small fixed loops over a register block's vectors are unrolled by pragma: -O2 would leave
// the accumulator arrays in memory.

/// Vectors of one register block of a row (4 vectors: 64 floats on avx512).
constexpr int kBlockVecs = 4;

/// Rows of A per register block of the product: each loaded vector of B serves kGemmRows rows.
constexpr int kGemmRows = 4;

/// Vectors per column block of the product: as many accumulators as the registers hold
/// (kGemmRows × NV accumulators, NV loads of B and a broadcast).
template <class V>
constexpr int gemm_vecs() {
  return V::W == 8 ? 2 : 4;
}

/// C[MR rows][NV·W columns] (+)= A[MR rows][k]·B[k][NV·W], columns past rem[v] untouched (FULL:
/// every vector whole, no masks).
template <class V, int MR, int NV, bool FULL>
FUSELM_INLINE void gemm_block(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                              int64_t k, const int (&rem)[NV], bool acc) {
  using R = typename V::R;
  constexpr int W = V::W;
  R s[MR][NV];
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      s[r][v] = acc && rem[v] ? (FULL ? V::load(c + r * ldc + v * W) : V::loadn(c + r * ldc + v * W, rem[v]))
                              : V::zero();
  for (int64_t p = 0; p < k; ++p) {
    R bv[NV];
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = FULL ? V::load(b + p * ldb + v * W) : V::loadn(b + p * ldb + v * W, rem[v]);
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const R x = V::set1(a[r * lda + p]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) s[r][v] = V::fma(x, bv[v], s[r][v]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      if (FULL) V::store(c + r * ldc + v * W, s[r][v]);
      else if (rem[v]) V::storen(c + r * ldc + v * W, s[r][v], rem[v]);
}

template <Isa I>
void rec_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t k,
              int64_t n, bool acc) {
  using V = Vec<I>;
  constexpr int W = V::W, NV = gemm_vecs<V>();
  for (int64_t j0 = 0; j0 < n; j0 += NV * W) {
    int rem[NV];
    for (int v = 0; v < NV; ++v) rem[v] = static_cast<int>(std::clamp<int64_t>(n - j0 - v * W, 0, W));
    const bool full = rem[NV - 1] == W;
    int64_t i = 0;
    for (; i + kGemmRows <= m; i += kGemmRows) {
      if (full) gemm_block<V, kGemmRows, NV, true>(a + i * lda, lda, b + j0, ldb, c + i * ldc + j0, ldc, k, rem, acc);
      else gemm_block<V, kGemmRows, NV, false>(a + i * lda, lda, b + j0, ldb, c + i * ldc + j0, ldc, k, rem, acc);
    }
    for (; i < m; ++i) {
      if (full) gemm_block<V, 1, NV, true>(a + i * lda, lda, b + j0, ldb, c + i * ldc + j0, ldc, k, rem, acc);
      else gemm_block<V, 1, NV, false>(a + i * lda, lda, b + j0, ldb, c + i * ldc + j0, ldc, k, rem, acc);
    }
  }
}

/// x·y over n floats.
template <class V>
FUSELM_INLINE float rec_dot(const float* x, const float* y, int64_t n) {
  using R = typename V::R;
  constexpr int W = V::W;
  R s0 = V::zero(), s1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    s0 = V::fma(V::load(x + i), V::load(y + i), s0);
    s1 = V::fma(V::load(x + i + W), V::load(y + i + W), s1);
  }
  for (; i < n; i += W) {
    const int r = static_cast<int>(std::min<int64_t>(W, n - i));
    s0 = V::fma(V::loadn(x + i, r), V::loadn(y + i, r), s0);
  }
  return V::hsum(V::add(s0, s1));
}

// Rows of S in blocks of W: each row's S·C partial sums stay a vector, and one transpose of the
// block's W vectors sums all W rows at once (instead of a horizontal sum per row).
template <Isa I>
void rec_ssd_step(float* s, const float* x, const float* b, const float* c, float* y, int64_t p, int64_t n, float da,
                  float dt, float d) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const R vda = V::set1(da);
  for (int64_t i0 = 0; i0 < p; i0 += W) {
    const int rows = static_cast<int>(std::min<int64_t>(W, p - i0));
    R acc[W];
    for (int r = 0; r < W; ++r) acc[r] = V::zero();
    for (int r = 0; r < rows; ++r) {
      float* row = s + (i0 + r) * n;
      const R w = V::set1(dt * x[i0 + r]);
      for (int64_t j = 0; j < n; j += W) {
        const int m = static_cast<int>(std::min<int64_t>(W, n - j));
        const R nv = V::fma(vda, V::loadn(row + j, m), V::mul(w, V::loadn(b + j, m)));
        V::storen(row + j, nv, m);
        acc[r] = V::fma(nv, V::loadn(c + j, m), acc[r]);
      }
    }
    V::transpose(acc);
    R sum = acc[0];
    for (int r = 1; r < W; ++r) sum = V::add(sum, acc[r]);
    V::storen(y + i0, V::fma(V::set1(d), V::loadn(x + i0, rows), sum), rows);
  }
}

template <Isa I>
float rec_selective_step(float* s, const float* a, const float* b, const float* c, int64_t n, float dt, float x) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  const R vdt = V::set1(dt), w = V::set1(dt * x);
  R acc = V::zero();
  for (int64_t j = 0; j < n; j += W) {
    const int r = static_cast<int>(std::min<int64_t>(W, n - j));
    const R da = V::exp(V::mul(vdt, V::loadn(a + j, r)));
    const R nv = V::fma(da, V::loadn(s + j, r), V::mul(w, V::loadn(b + j, r)));
    V::storen(s + j, nv, r);
    acc = V::fma(nv, V::loadn(c + j, r), acc);
  }
  return V::hsum(acc);
}

// Two passes over S per token (the delta needs the whole of Sᵀk first): a read-only pass for
// kv = Sᵀ(e⊙k) (the decay folded into k), then S <- e·S + k ⊗ delta with o = Sᵀq accumulated as
// each row is written. Columns in blocks of kBlockVecs vectors, the block's sums in registers.
template <Isa I>
void rec_delta_step(float* s, const float* q, const float* k, const float* v, const float* decay, float decay_all,
                    float beta, float* o, int64_t dk, int64_t dv) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  for (int64_t j0 = 0; j0 < dv; j0 += kBlockVecs * W) {
    int rem[kBlockVecs];
    #pragma GCC unroll 16
    for (int u = 0; u < kBlockVecs; ++u) rem[u] = static_cast<int>(std::clamp<int64_t>(dv - j0 - u * W, 0, W));
    R acc[kBlockVecs];
    #pragma GCC unroll 16
    for (int u = 0; u < kBlockVecs; ++u) acc[u] = V::zero();
    for (int64_t i = 0; i < dk; ++i) {
      const R ek = V::set1(k[i] * (decay ? decay[i] : decay_all));
      const float* row = s + i * dv + j0;
      #pragma GCC unroll 16
      for (int u = 0; u < kBlockVecs; ++u)
        if (rem[u]) acc[u] = V::fma(ek, V::loadn(row + u * W, rem[u]), acc[u]);
    }
    const R vb = V::set1(beta);
    R delta[kBlockVecs], out[kBlockVecs];
    #pragma GCC unroll 16
    for (int u = 0; u < kBlockVecs; ++u) {
      delta[u] = rem[u] ? V::mul(vb, V::sub(V::loadn(v + j0 + u * W, rem[u]), acc[u])) : V::zero();
      out[u] = V::zero();
    }
    for (int64_t i = 0; i < dk; ++i) {
      const R e = V::set1(decay ? decay[i] : decay_all), ki = V::set1(k[i]), qi = V::set1(q[i]);
      float* row = s + i * dv + j0;
      #pragma GCC unroll 16
      for (int u = 0; u < kBlockVecs; ++u) {
        if (!rem[u]) continue;
        const R nv = V::fma(e, V::loadn(row + u * W, rem[u]), V::mul(ki, delta[u]));
        V::storen(row + u * W, nv, rem[u]);
        out[u] = V::fma(qi, nv, out[u]);
      }
    }
    #pragma GCC unroll 16
    for (int u = 0; u < kBlockVecs; ++u)
      if (rem[u]) V::storen(o + j0 + u * W, out[u], rem[u]);
  }
}

template <Isa I>
float rec_decayed_dot(const float* a, const float* b, const float* ga, const float* gb, int64_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  R acc = V::zero();
  for (int64_t i = 0; i < n; i += W) {
    const int r = static_cast<int>(std::min<int64_t>(W, n - i));
    const R e = V::exp(V::sub(V::loadn(ga + i, r), V::loadn(gb + i, r)));
    acc = V::fma(V::mul(V::loadn(a + i, r), V::loadn(b + i, r)), e, acc);
  }
  return V::hsum(acc);
}

template <Isa I>
void rec_conv_rows(const float* const* in, int64_t k, const float* wt, int64_t ldw, const float* bias, float* out,
                   int64_t n, bool silu) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  for (int64_t c = 0; c < n; c += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, n - c));
    R acc = bias ? V::loadn(bias + c, m) : V::zero();
    for (int64_t j = 0; j < k; ++j) acc = V::fma(V::loadn(wt + j * ldw + c, m), V::loadn(in[j] + c, m), acc);
    V::storen(out + c, silu ? vsilu<V>(acc) : acc, m);
  }
}

template <Isa I>
void rec_exp_inplace(float* x, int64_t n) {
  using V = Vec<I>;
  constexpr int W = V::W;
  for (int64_t i = 0; i < n; i += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, n - i));
    V::storen(x + i, V::exp(V::loadn(x + i, m)), m);
  }
}

template <Isa I>
void rec_scale_mul(const float* a, const float* b, float f, float* out, int64_t n) {
  using V = Vec<I>;
  constexpr int W = V::W;
  const typename V::R vf = V::set1(f);
  for (int64_t i = 0; i < n; i += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, n - i));
    const typename V::R x = V::mul(vf, V::loadn(a + i, m));
    V::storen(out + i, b ? V::mul(x, V::loadn(b + i, m)) : x, m);
  }
}

template <Isa I>
float rec_dot_fn(const float* a, const float* b, int64_t n) {
  return rec_dot<Vec<I>>(a, b, n);
}

// softplus(x) = max(x, 0) + log1p(e^{-|x|}), with log1p(y) = 2·atanh(y / (2 + y)) by its odd
// series: y <= 1 makes the argument at most 1/3, so nine terms are exact to f32 rounding.
template <Isa I>
void rec_softplus_inplace(float* x, int64_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  constexpr int W = V::W;
  for (int64_t i = 0; i < n; i += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, n - i));
    const R v = V::loadn(x + i, m);
    if constexpr (V::isa == Isa::generic) {
      V::storen(x + i, v > 20.f ? v : std::log1p(std::exp(v)), m);
    } else {
      const R e = V::exp(V::neg(V::abs(v)));
      const R z = V::div(e, V::add(V::set1(2.f), e)), z2 = V::mul(z, z);
      R p = V::set1(1.f / 17.f);
      for (int k = 15; k >= 1; k -= 2) p = V::fma(p, z2, V::set1(1.f / static_cast<float>(k)));
      const R sp = V::fma(V::add(z, z), p, V::max(v, V::zero()));
      V::storen(x + i, V::select(V::lt(V::set1(20.f), v), v, sp), m);
    }
  }
}

template <Isa I>
void rec_silu_inplace(float* x, int64_t n) {
  using V = Vec<I>;
  constexpr int W = V::W;
  for (int64_t i = 0; i < n; i += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, n - i));
    V::storen(x + i, vsilu<V>(V::loadn(x + i, m)), m);
  }
}

// Up to kBlockVecs vectors of h stay in registers over all the tokens: the step is one fma per
// vector, so independent vectors hide its latency.
template <class V, int NV>
FUSELM_INLINE void linear_rows_block(float* h, const float* a, int64_t a_t, const float* b, int64_t b_t, float* out,
                                     int64_t o_t, int64_t tokens, const int (&rem)[NV]) {
  using R = typename V::R;
  constexpr int W = V::W;
  R s[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) s[v] = V::loadn(h + v * W, rem[v]);
  for (int64_t t = 0; t < tokens; ++t) {
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      s[v] = V::fma(V::loadn(a + t * a_t + v * W, rem[v]), s[v], V::loadn(b + t * b_t + v * W, rem[v]));
      V::storen(out + t * o_t + v * W, s[v], rem[v]);
    }
  }
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) V::storen(h + v * W, s[v], rem[v]);
}

template <Isa I>
void rec_linear_rows(float* h, const float* a, int64_t a_t, const float* b, int64_t b_t, float* out, int64_t o_t,
                     int64_t tokens, int64_t n) {
  using V = Vec<I>;
  constexpr int W = V::W;
  for (int64_t c = 0; c < n; c += kBlockVecs * W) {
    int rem[kBlockVecs];
    for (int v = 0; v < kBlockVecs; ++v) rem[v] = static_cast<int>(std::clamp<int64_t>(n - c - v * W, 0, W));
    linear_rows_block<V, kBlockVecs>(h + c, a + c, a_t, b + c, b_t, out + c, o_t, tokens, rem);
  }
}

template <Isa I>
constexpr RecurrentKernels make_recurrent_kernels() {
  return {&rec_gemm<I>,        &rec_ssd_step<I>,   &rec_selective_step<I>, &rec_delta_step<I>,
          &rec_decayed_dot<I>, &rec_conv_rows<I>, &rec_exp_inplace<I>, &rec_scale_mul<I>,
          &rec_dot_fn<I>,      &rec_softplus_inplace<I>, &rec_silu_inplace<I>, &rec_linear_rows<I>};
}

}  // namespace
}  // namespace fuselm::kernels
