#include "kernels/cpu/recurrent/recurrent.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/recurrent/recurrent_impl.h"
#include "isa/recurrent_tables.inc"

namespace fuselm::kernels {

const RecurrentKernels kRecurrentKernelsGeneric = make_recurrent_kernels<Isa::generic>();

const RecurrentKernels& recurrent_kernels() { return isa_kernels<RecurrentKernels>(); }

namespace {

const RecurrentKernels& rk() { return recurrent_kernels(); }

// Tokens of one chunk of the chunked forms (transformers' fallbacks use 64 too).
constexpr int64_t kChunk = 64;

// Multiply-adds a thread must get before a call splits: waking a pool thread costs tens of µs on
// a shared machine, more than a small decode step (bench_recurrent: a selective scan's step of
// 1536 channels ran slower on two threads at 1 << 15).
constexpr int64_t kMinWorkPerThread = int64_t{1} << 17;

/// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

/// Runs fn(seq, unit) for every sequence and every unit (head or channel block) on the pool,
/// taking the next item as a thread comes free. work: multiply-adds of one item's token.
template <class F>
void for_items(std::span<const RecurrentSeq> seqs, int64_t units, int64_t work, F&& fn) {
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.count;
  const int64_t items = static_cast<int64_t>(seqs.size()) * units;
  const int nt = kernel_threads(tokens * units * work, kMinWorkPerThread);
  parallel_for_dynamic(nt, items, [&](int64_t i) { fn(seqs[i / units], i % units); });
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

bool chunked(ScanForm form, int64_t count) {
  return form == ScanForm::chunked || (form == ScanForm::automatic && count >= kRecurrentChunkMin);
}

/// dst[c][r] = src[r][c] for an r×c block (src row stride lds, dst row stride ldd).
void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// ---- causal conv1d ----------------------------------------------------------------------------
// State [K-1][C], time-major: a token's inputs of all channels are one row, so the window of a
// block of channels is K row pointers and a token is one vector pass over the block.

/// Input u of the sequence for channels from c0 (u < 0: row K-1+u of the state).
const float* conv_in(const Conv1dArgs& a, const RecurrentSeq& s, int64_t u, int64_t c0) {
  return u < 0 ? s.state + (a.width - 1 + u) * a.channels + c0 : a.x + (s.first + u) * a.x_t + c0 * a.x_c;
}

/// Channels [c0, c1) of a sequence whose channels are unit-stride in x and out; wt: the block's
/// weight transposed, [K][c1 - c0].
void conv_block(const Conv1dArgs& a, const RecurrentSeq& s, const float* wt, int64_t c0, int64_t c1) {
  const int64_t K = a.width, hist = K - 1, C = a.channels;
  if (s.fresh)
    for (int64_t j = 0; j < hist; ++j) std::fill(s.state + j * C + c0, s.state + j * C + c1, 0.f);
  std::vector<const float*> big;
  const float* small[16];
  const float** rows = K <= 16 ? small : (big.resize(K), big.data());
  const RecurrentKernels& k = rk();
  for (int64_t t = 0; t < s.count; ++t) {
    for (int64_t j = 0; j < K; ++j) rows[j] = conv_in(a, s, t - hist + j, c0);
    k.conv_rows(rows, K, wt, c1 - c0, a.bias ? a.bias + c0 : nullptr, a.out + (s.first + t) * a.out_t + c0, c1 - c0,
                a.silu);
  }
  // Row m of the new state is input T-(K-1)+m; in ascending m a state row read (T+m > m) is never
  // one already written.
  for (int64_t m = 0; m < hist; ++m) {
    const float* src = conv_in(a, s, s.count - hist + m, c0);
    if (src != s.state + m * C + c0) std::copy(src, src + (c1 - c0), s.state + m * C + c0);
  }
}

/// One channel of any strides (scalar).
void conv_channel(const Conv1dArgs& a, const RecurrentSeq& s, int64_t c) {
  const int64_t K = a.width, hist = K - 1, T = s.count, C = a.channels;
  float* st = s.state + c;  // row j at st[j * C]
  if (s.fresh)
    for (int64_t j = 0; j < hist; ++j) st[j * C] = 0.f;
  const float* w = a.weight + c * K;
  const float* x = a.x + c * a.x_c + s.first * a.x_t;
  float* out = a.out + c * a.out_c + s.first * a.out_t;
  const float b = a.bias ? a.bias[c] : 0.f;
  auto in = [&](int64_t u) { return u < 0 ? st[(hist + u) * C] : x[u * a.x_t]; };
  for (int64_t t = 0; t < T; ++t) {
    float acc = b;
    for (int64_t j = 0; j < K; ++j) acc += w[j] * in(t - hist + j);
    out[t * a.out_t] = a.silu ? acc / (1.f + std::exp(-acc)) : acc;
  }
  for (int64_t m = 0; m < hist; ++m) st[m * C] = in(T - hist + m);  // ascending: see conv_block
}

// ---- SSD ----------------------------------------------------------------------------------------

struct SsdHead {
  const SsdArgs& a;
  const RecurrentSeq& s;
  int64_t h, g;
  float* S;
  const float* cb;  // the sequence's C·Bᵀ blocks ([chunk][group][kChunk][kChunk]; chunked runs)

  const float* x(int64_t t) const { return a.x + (s.first + t) * a.x_t + h * a.x_h; }
  const float* B(int64_t t) const { return a.B + (s.first + t) * a.b_t + g * a.b_g; }
  const float* C(int64_t t) const { return a.C + (s.first + t) * a.c_t + g * a.c_g; }
  float* y(int64_t t) const { return a.y + (s.first + t) * a.y_t + h * a.y_h; }
  float dt(int64_t t) const {
    float v = a.dt[(s.first + t) * a.dt_t + h * a.dt_h] + (a.dt_bias ? a.dt_bias[h] : 0.f);
    if (a.dt_softplus) v = softplus(v);
    return std::min(std::max(v, a.dt_min), a.dt_max);
  }
};

void ssd_steps(const SsdHead& hd, int64_t t0, int64_t t1) {
  const SsdArgs& a = hd.a;
  const float D = a.D ? a.D[hd.h] : 0.f;
  for (int64_t t = t0; t < t1; ++t) {
    const float dt = hd.dt(t);
    rk().ssd_step(hd.S, hd.x(t), hd.B(t), hd.C(t), hd.y(t), a.head_dim, a.state_dim, std::exp(dt * a.A[hd.h]), dt, D);
  }
}

// One chunk of L tokens as matrix products (the SSD "dual" form of mamba2_chunk_scan): with a_t the
// running sum of dt·A, y_t = Σ_{s<=t} e^{a_t-a_s}·dt_s·(C_t·B_s)·x_s + e^{a_t}·S₀C_t + D·x_t and
// S = e^{a_L}·S₀ + Σ_s e^{a_L-a_s}·dt_s·x_s ⊗ B_s.
void ssd_chunk(const SsdHead& hd, int64_t t0, int64_t L) {
  const SsdArgs& a = hd.a;
  const RecurrentKernels& k = rk();
  const int64_t P = a.head_dim, N = a.state_dim;
  float* buf = thread_scratch(0, static_cast<size_t>(2 * L + L * L + L * P + N * P + L * N + P * L));
  float* dt = buf;
  float* cum = dt + L;
  float* M = cum + L;      // [L][L]
  float* Y = M + L * L;    // [L][P]
  float* ST = Y + L * P;   // [N][P]
  float* Ce = ST + N * P;  // [L][N]
  float* XT = Ce + L * N;  // [P][L]
  float run = 0.f;
  for (int64_t t = 0; t < L; ++t) {
    dt[t] = hd.dt(t0 + t);
    run += dt[t] * a.A[hd.h];
    cum[t] = run;
  }
  const float* cb = hd.cb + ((t0 / kChunk) * a.groups + hd.g) * kChunk * kChunk;  // shared by the group's heads
  float* e = Ce;  // free until the C rows are scaled below
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t s = 0; s <= t; ++s) e[s] = cum[t] - cum[s];
    k.exp_inplace(e, t + 1);
    for (int64_t s = 0; s < L; ++s) M[t * L + s] = s <= t ? cb[t * L + s] * e[s] * dt[s] : 0.f;
  }
  k.gemm(M, L, hd.x(t0), a.x_t, Y, P, L, L, P, false);
  transpose(hd.S, N, ST, P, P, N);
  for (int64_t t = 0; t < L; ++t) {
    const float e = std::exp(cum[t]);
    const float* c = hd.C(t0 + t);
    for (int64_t n = 0; n < N; ++n) Ce[t * N + n] = e * c[n];
  }
  k.gemm(Ce, N, ST, P, Y, P, L, N, P, true);
  const float D = a.D ? a.D[hd.h] : 0.f;
  for (int64_t t = 0; t < L; ++t) {
    const float* x = hd.x(t0 + t);
    float* y = hd.y(t0 + t);
    for (int64_t p = 0; p < P; ++p) y[p] = Y[t * P + p] + D * x[p];
  }
  for (int64_t s = 0; s < L; ++s) {
    const float w = std::exp(cum[L - 1] - cum[s]) * dt[s];
    const float* x = hd.x(t0 + s);
    for (int64_t p = 0; p < P; ++p) XT[p * L + s] = w * x[p];
  }
  const float eL = std::exp(cum[L - 1]);
  for (int64_t i = 0; i < P * N; ++i) hd.S[i] *= eL;
  k.gemm(XT, L, hd.B(t0), a.b_t, hd.S, N, P, L, N, true);
}

// ---- gated delta rule ---------------------------------------------------------------------------

struct DeltaHead {
  const DeltaRuleArgs& a;
  const RecurrentSeq& s;
  int64_t h, kh;
  float* S;

  const float* q(int64_t t) const { return a.q + (s.first + t) * a.q_t + kh * a.q_h; }
  const float* k(int64_t t) const { return a.k + (s.first + t) * a.k_t + kh * a.k_h; }
  const float* v(int64_t t) const { return a.v + (s.first + t) * a.v_t + h * a.v_h; }
  const float* g(int64_t t) const { return a.g + (s.first + t) * a.g_t + h * a.g_h; }
  float beta(int64_t t) const { return a.beta[(s.first + t) * a.beta_t + h * a.beta_h]; }
  float* o(int64_t t) const { return a.out + (s.first + t) * a.o_t + h * a.o_h; }

  /// q (scaled by Dk^-0.5) and k of token t, l2-normalised when asked, into qo and ko.
  void qk(int64_t t, float* qo, float* ko) const {
    const int64_t n = a.k_dim;
    const float scale = 1.f / std::sqrt(static_cast<float>(n));
    const RecurrentKernels& rkn = rk();
    auto norm = [&](const float* x, float* out, float extra) {
      const float f = a.l2norm ? extra / std::sqrt(rkn.dot(x, x, n) + 1e-6f) : extra;
      rkn.scale_mul(x, nullptr, f, out, n);
    };
    norm(q(t), qo, scale);
    norm(k(t), ko, 1.f);
  }
};

void delta_steps(const DeltaHead& hd, int64_t t0, int64_t t1) {
  const int64_t Dk = hd.a.k_dim;
  float* buf = thread_scratch(1, static_cast<size_t>(3 * Dk));
  float *q = buf, *k = buf + Dk, *e = buf + 2 * Dk;
  for (int64_t t = t0; t < t1; ++t) {
    hd.qk(t, q, k);
    const float* g = hd.g(t);
    float all = 1.f;
    if (hd.a.per_channel_g) {
      std::copy_n(g, Dk, e);
      rk().exp_inplace(e, Dk);
    } else {
      all = std::exp(g[0]);
    }
    rk().delta_step(hd.S, q, k, hd.v(t), hd.a.per_channel_g ? e : nullptr, all, hd.beta(t), hd.o(t), Dk, hd.a.v_dim);
  }
}

// Per-channel decays span at most this much (log) over a chunk for the factored products: each
// factor is then within e^{±kMaxHalfSpan}, far inside the f32 range.
constexpr float kMaxHalfSpan = 40.f;

/// Per-channel decay, factored: e^{γ_t-γ_s} = e^{γ_t-c}·e^{c-γ_s} with c the channel's midpoint
/// over the chunk, so the products are two matrix products. False (nothing written) when a
/// channel's decay spans more than 2·kMaxHalfSpan, where a factor could overflow.
bool delta_pairs_factored(const DeltaRuleArgs& a, const float* Q, const float* K, const float* G, int64_t L, float* kk,
                          float* qk) {
  const RecurrentKernels& rkn = rk();
  const int64_t Dk = a.k_dim;
  float* buf = thread_scratch(3, static_cast<size_t>(4 * L * Dk + Dk));
  float *mid = buf, *left = mid + Dk, *right = left + L * Dk, *qm = right + L * Dk, *rt = qm + L * Dk;
  for (int64_t i = 0; i < Dk; ++i) {  // min and max over the chunk: g need not be monotone
    float lo = G[i], hi = G[i];
    for (int64_t t = 1; t < L; ++t) lo = std::min(lo, G[t * Dk + i]), hi = std::max(hi, G[t * Dk + i]);
    if (!(hi - lo <= 2 * kMaxHalfSpan)) return false;
    mid[i] = 0.5f * (lo + hi);
  }
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < Dk; ++i) {
      left[t * Dk + i] = G[t * Dk + i] - mid[i];
      right[t * Dk + i] = mid[i] - G[t * Dk + i];
    }
  rkn.exp_inplace(left, L * Dk);
  rkn.exp_inplace(right, L * Dk);
  for (int64_t t = 0; t < L * Dk; ++t) {
    qm[t] = Q[t] * left[t];
    left[t] *= K[t];
    right[t] *= K[t];
  }
  transpose(right, Dk, rt, L, L, Dk);
  rkn.gemm(left, Dk, rt, L, kk, L, L, Dk, L, false);
  rkn.gemm(qm, Dk, rt, L, qk, L, L, Dk, L, false);
  return true;
}

/// The chunk's L×L decayed products: kk[t][s] = -β_t·Σ_i k_t[i]k_s[i]e^{γ_t[i]-γ_s[i]} (s < t) and
/// qk[t][s] = Σ_i q_t[i]k_s[i]e^{γ_t[i]-γ_s[i]} (s <= t), 0 elsewhere. G: γ [L][Dk] (per channel)
/// or [L] (per head); KT: k transposed [Dk][L].
void delta_pairs(const DeltaRuleArgs& a, const float* Q, const float* K, const float* KT, const float* G,
                 const float* beta, int64_t L, float* kk, float* qk) {
  const RecurrentKernels& rkn = rk();
  const int64_t Dk = a.k_dim;
  if (a.per_channel_g) {
    if (delta_pairs_factored(a, Q, K, G, L, kk, qk)) {
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s < L; ++s) {
          kk[t * L + s] = s < t ? -beta[t] * kk[t * L + s] : 0.f;
          qk[t * L + s] = s <= t ? qk[t * L + s] : 0.f;
        }
      return;
    }
    for (int64_t t = 0; t < L; ++t)  // a decay too strong to factor: each pair on its own
      for (int64_t s = 0; s < L; ++s) {
        kk[t * L + s] = s < t ? -beta[t] * rkn.decayed_dot(K + t * Dk, K + s * Dk, G + t * Dk, G + s * Dk, Dk) : 0.f;
        qk[t * L + s] = s <= t ? rkn.decayed_dot(Q + t * Dk, K + s * Dk, G + t * Dk, G + s * Dk, Dk) : 0.f;
      }
    return;
  }
  rkn.gemm(K, Dk, KT, L, kk, L, L, Dk, L, false);
  rkn.gemm(Q, Dk, KT, L, qk, L, L, Dk, L, false);
  float e[kChunk];
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t s = 0; s <= t; ++s) e[s] = G[t] - G[s];
    rkn.exp_inplace(e, t + 1);
    for (int64_t s = 0; s < L; ++s) {
      kk[t * L + s] = s < t ? -beta[t] * kk[t * L + s] * e[s] : 0.f;
      qk[t * L + s] = s <= t ? qk[t * L + s] * e[s] : 0.f;
    }
  }
}

// One chunk of L tokens in the WY form of torch_chunk_gated_delta_rule / chunk_kimi_delta_attention:
// U = (I + A)⁻¹·βv and W = (I + A)⁻¹·(βk⊙e^γ) by forward substitution (A: the strictly lower
// decayed βk·k products), then v' = U - W·S, o = (q⊙e^γ)·S + QK·v', S = e^{γ_L}⊙S + (k⊙e^{γ_L-γ})ᵀ·v'.
void delta_chunk(const DeltaHead& hd, int64_t t0, int64_t L) {
  const DeltaRuleArgs& a = hd.a;
  const RecurrentKernels& rkn = rk();
  const int64_t Dk = a.k_dim, Dv = a.v_dim, gw = a.per_channel_g ? Dk : 1;
  float* buf = thread_scratch(1, static_cast<size_t>(L * (4 * Dk + 2 * L + 2 * Dv + 3 * gw + 1) + Dk * L));
  float* Q = buf;             // [L][Dk], then q⊙e^γ
  float* K = Q + L * Dk;      // [L][Dk]
  float* KT = K + L * Dk;     // [Dk][L], then (k⊙e^{γ_L-γ})ᵀ
  float* NW = KT + Dk * L;    // [L][Dk]: -W
  float* G = NW + L * Dk;     // [L][gw]: γ
  float* kk = G + L * gw;     // [L][L]
  float* qk = kk + L * L;     // [L][L]
  float* U = qk + L * L;      // [L][Dv]
  float* O = U + L * Dv;      // [L][Dv]
  float* beta = O + L * Dv;   // [L]
  float* EG = beta + L;       // [L][gw]: e^γ
  float* ER = EG + L * gw;    // [L][gw]: e^{γ_L-γ}
  for (int64_t t = 0; t < L; ++t) {
    hd.qk(t0 + t, Q + t * Dk, K + t * Dk);
    beta[t] = hd.beta(t0 + t);
    const float* g = hd.g(t0 + t);
    for (int64_t i = 0; i < gw; ++i) G[t * gw + i] = g[i] + (t ? G[(t - 1) * gw + i] : 0.f);
  }
  transpose(K, Dk, KT, L, L, Dk);
  delta_pairs(a, Q, K, KT, G, beta, L, kk, qk);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < gw; ++i) {
      EG[t * gw + i] = G[t * gw + i];
      ER[t * gw + i] = G[(L - 1) * gw + i] - G[t * gw + i];
    }
  rkn.exp_inplace(EG, L * gw);
  rkn.exp_inplace(ER, L * gw);
  const int64_t gi = gw == 1 ? 0 : 1;  // channel i's decay is [t * gw + i * gi]
  auto decay_row = [&](float* row, const float* eg, float f) {  // row ⊙ e^γ_t times f
    rkn.scale_mul(row, gw == 1 ? nullptr : eg, gw == 1 ? f * eg[0] : f, row, Dk);
  };
  for (int64_t t = 0; t < L; ++t) {
    rkn.scale_mul(hd.v(t0 + t), nullptr, beta[t], U + t * Dv, Dv);
    std::copy_n(K + t * Dk, Dk, NW + t * Dk);
    decay_row(NW + t * Dk, EG + t * gw, -beta[t]);
    if (t) {
      rkn.gemm(kk + t * L, L, U, Dv, U + t * Dv, Dv, 1, t, Dv, true);
      rkn.gemm(kk + t * L, L, NW, Dk, NW + t * Dk, Dk, 1, t, Dk, true);
    }
  }
  rkn.gemm(NW, Dk, hd.S, Dv, U, Dv, L, Dk, Dv, true);  // U is now v'
  for (int64_t t = 0; t < L; ++t) decay_row(Q + t * Dk, EG + t * gw, 1.f);
  rkn.gemm(Q, Dk, hd.S, Dv, O, Dv, L, Dk, Dv, false);
  rkn.gemm(qk, L, U, Dv, O, Dv, L, L, Dv, true);
  for (int64_t t = 0; t < L; ++t) std::copy_n(O + t * Dv, Dv, hd.o(t0 + t));
  for (int64_t i = 0; i < Dk; ++i) {
    rkn.scale_mul(hd.S + i * Dv, nullptr, EG[(L - 1) * gw + i * gi], hd.S + i * Dv, Dv);
    for (int64_t s = 0; s < L; ++s) KT[i * L + s] = K[s * Dk + i] * ER[s * gw + i * gi];
  }
  rkn.gemm(KT, L, U, Dv, hd.S, Dv, Dk, L, Dv, true);
}

/// C·Bᵀ of every chunk and group of the sequences that run chunked (the L×L products every head
/// of a group shares), in one parallel pass; cb_at[i]: sequence i's first block (-1: steps).
std::vector<float> ssd_group_products(const SsdArgs& a, std::span<const RecurrentSeq> seqs, ScanForm form,
                                      std::vector<int64_t>& cb_at) {
  struct Block {
    const RecurrentSeq* s;
    int64_t g, t0, at;
  };
  std::vector<Block> blocks;
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!chunked(form, seqs[i].count)) continue;
    cb_at[i] = total;
    for (int64_t t0 = 0; t0 < seqs[i].count; t0 += kChunk)
      for (int64_t g = 0; g < a.groups; ++g, total += kChunk * kChunk) blocks.push_back({&seqs[i], g, t0, total});
  }
  std::vector<float> cb(static_cast<size_t>(total));
  const int64_t N = a.state_dim;
  const int nt = kernel_threads(static_cast<int64_t>(blocks.size()) * kChunk * kChunk * N, kMinWorkPerThread);
  parallel_for_dynamic(nt, static_cast<int64_t>(blocks.size()), [&](int64_t i) {
    const Block& b = blocks[i];
    const int64_t L = std::min(kChunk, b.s->count - b.t0), first = b.s->first + b.t0;
    float* bt = thread_scratch(0, static_cast<size_t>(N * L));  // B transposed, [N][L]
    transpose(a.B + first * a.b_t + b.g * a.b_g, a.b_t, bt, L, L, N);
    rk().gemm(a.C + first * a.c_t + b.g * a.c_g, a.c_t, bt, L, cb.data() + b.at, L, L, N, L, false);
  });
  return cb;
}

}  // namespace

void causal_conv1d(const Conv1dArgs& a, std::span<const RecurrentSeq> seqs) {
  require(a.x && a.weight && a.out && a.channels > 0 && a.width > 0, "causal_conv1d: bad arguments");
  constexpr int64_t kBlock = 256;
  const int64_t C = a.channels, K = a.width, blocks = (C + kBlock - 1) / kBlock;
  if (a.x_c != 1 || a.out_c != 1) {  // channels not unit-stride: one channel at a time
    for_items(seqs, blocks, kBlock * K, [&](const RecurrentSeq& s, int64_t b) {
      for (int64_t c = b * kBlock; c < std::min(C, (b + 1) * kBlock); ++c) conv_channel(a, s, c);
    });
    return;
  }
  // One item per channel block, over every sequence: the block's weight is transposed once.
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.count;
  const int nt = kernel_threads(tokens * C * K, kMinWorkPerThread);
  parallel_for_dynamic(nt, blocks, [&](int64_t b) {
    const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
    float* wt = thread_scratch(2, static_cast<size_t>(kBlock * K));
    transpose(a.weight + c0 * K, K, wt, c1 - c0, c1 - c0, K);
    for (const auto& s : seqs) conv_block(a, s, wt, c0, c1);
  });
}

void ssd_scan(const SsdArgs& a, std::span<const RecurrentSeq> seqs, ScanForm form) {
  require(a.x && a.dt && a.A && a.B && a.C && a.y && a.heads > 0 && a.head_dim > 0 && a.state_dim > 0,
          "ssd_scan: bad arguments");
  require(a.groups > 0 && a.heads % a.groups == 0, "ssd_scan: the groups do not divide the heads");
  const int64_t per_group = a.heads / a.groups, hs = a.head_dim * a.state_dim;
  std::vector<int64_t> cb_at(seqs.size(), -1);
  const std::vector<float> cb = ssd_group_products(a, seqs, form, cb_at);
  for_items(seqs, a.heads, 2 * hs, [&](const RecurrentSeq& s, int64_t h) {
    const int64_t i = &s - seqs.data();
    const SsdHead hd{a, s, h, h / per_group, s.state + h * hs, cb_at[i] < 0 ? nullptr : cb.data() + cb_at[i]};
    if (s.fresh) std::fill_n(hd.S, hs, 0.f);
    if (!hd.cb) return ssd_steps(hd, 0, s.count);
    for (int64_t t = 0; t < s.count; t += kChunk) ssd_chunk(hd, t, std::min(kChunk, s.count - t));
  });
}

void selective_scan(const SelectiveArgs& a, std::span<const RecurrentSeq> seqs) {
  require(a.x && a.dt && a.A && a.B && a.C && a.y && a.channels > 0 && a.state_dim > 0, "selective_scan: bad arguments");
  require(a.groups > 0 && a.channels % a.groups == 0, "selective_scan: the groups do not divide the channels");
  constexpr int64_t kBlock = 16;
  const int64_t N = a.state_dim, per_group = a.channels / a.groups, blocks = (a.channels + kBlock - 1) / kBlock;
  // A block of channels token by token: the block's dt (softplus) and z (silu) are one vector each.
  for_items(seqs, blocks, kBlock * N * 4, [&](const RecurrentSeq& s, int64_t b) {
    const RecurrentKernels& k = rk();
    const int64_t d0 = b * kBlock, nd = std::min(a.channels, d0 + kBlock) - d0;
    if (s.fresh) std::fill_n(s.state + d0 * N, nd * N, 0.f);
    float dt[kBlock], z[kBlock];
    for (int64_t t = s.first; t < s.first + s.count; ++t) {
      for (int64_t c = 0; c < nd; ++c) {
        dt[c] = a.dt[(d0 + c) * a.dt_d + t * a.dt_t] + (a.dt_bias ? a.dt_bias[d0 + c] : 0.f);
        z[c] = a.z ? a.z[(d0 + c) * a.z_d + t * a.z_t] : 0.f;
      }
      if (a.dt_softplus) k.softplus_inplace(dt, nd);
      if (a.z) k.silu_inplace(z, nd);
      for (int64_t c = 0; c < nd; ++c) {
        const int64_t d = d0 + c, grp = d / per_group;
        const float x = a.x[d * a.x_d + t * a.x_t];
        const float* B = a.B + (grp * a.tokens + t) * N;
        const float* C = a.C + (grp * a.tokens + t) * N;
        const float y = k.selective_step(s.state + d * N, a.A + d * N, B, C, N, dt[c], x) + (a.D ? a.D[d] * x : 0.f);
        a.y[d * a.y_d + t * a.y_t] = a.z ? y * z[c] : y;
      }
    }
  });
}

void gated_delta_rule(const DeltaRuleArgs& a, std::span<const RecurrentSeq> seqs, ScanForm form) {
  require(a.q && a.k && a.v && a.g && a.beta && a.out && a.k_dim > 0 && a.v_dim > 0, "gated_delta_rule: bad arguments");
  require(a.k_heads > 0 && a.v_heads % a.k_heads == 0, "gated_delta_rule: the key heads do not divide the value heads");
  const int64_t per_k = a.v_heads / a.k_heads, hs = a.k_dim * a.v_dim;
  for_items(seqs, a.v_heads, 3 * hs, [&](const RecurrentSeq& s, int64_t h) {
    const DeltaHead hd{a, s, h, h / per_k, s.state + h * hs};
    if (s.fresh) std::fill_n(hd.S, hs, 0.f);
    if (!chunked(form, s.count)) return delta_steps(hd, 0, s.count);
    for (int64_t t = 0; t < s.count; t += kChunk) delta_chunk(hd, t, std::min(kChunk, s.count - t));
  });
}

}  // namespace fuselm::kernels
