#pragma once
// Recurrent (stateful) kernels of the hybrid models (docs/recurrent.md): the causal depthwise
// conv1d with its rolling window, Mamba2's SSD scan, Mamba(1)'s selective scan and the gated delta
// rule (Gated DeltaNet, Kimi delta attention). Each call runs the new tokens of several sequences
// of one flattened batch, each from and back into its own state, in one parallel region over
// (sequence, head or channel block). Semantics: transformers' torch fallbacks of the dispatch
// points the ops replace (the docstrings of python/fuselm_capture/recurrent_ops.py).
//
// All tensors are f32. Token t of the batch is at `base + t * token_stride`; the innermost
// (feature) dim is unit-stride unless a stride is given for it. States are f32 arrays laid out as
// each function says; a sequence marked `fresh` starts from zeros (its state is overwritten).
#include <cstdint>
#include <span>

namespace fuselm::kernels {

/// One sequence of a recurrent call: tokens [first, first + count) of the batch, its state.
struct RecurrentSeq {
  int64_t first = 0;
  int64_t count = 0;
  float* state = nullptr;
  bool fresh = false;  // no earlier tokens: start from a zero state
};

/// Which form a scan runs: chunked (prefill) or one token at a time (decode); automatic picks
/// chunked for sequences of at least kRecurrentChunkMin new tokens. Both give the same result to
/// fp32 rounding; tests force each.
enum class ScanForm { automatic, step, chunked };
inline constexpr int64_t kRecurrentChunkMin = 16;

/// Causal depthwise conv1d. x[c, t] at x + c*x_c + t*x_t, out likewise; weight [C, K] dense,
/// bias [C] or null; out[c,t] = act(bias[c] + sum_j w[c,j] * x[c, t-(K-1)+j]), inputs before a
/// sequence's first new token from its state [K-1][C] (oldest first; C floats for K = 1). silu:
/// act = x·sigmoid(x), else the identity. Vectorised over channels when x_c and out_c are 1.
/// Throws std::invalid_argument for sizes < 1 or null pointers.
struct Conv1dArgs {
  const float* x = nullptr;
  int64_t x_c = 0, x_t = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;
  float* out = nullptr;
  int64_t out_c = 0, out_t = 0;
  int64_t channels = 0, width = 0;
  bool silu = false;
};
void causal_conv1d(const Conv1dArgs& a, std::span<const RecurrentSeq> seqs);

/// Mamba2 SSD scan. x [T, H, P] (token stride x_t, head stride x_h), dt [T, H] (dt_t, dt_h), A [H],
/// B and C [T, G, N] (token stride bc_t... per tensor, group stride *_g), D [H] or null, dt_bias
/// [H] or null; y [T, H, P] (y_t, y_h). Head h reads group h / (H/G). dt' = clamp(softplus?(dt +
/// dt_bias), dt_min, dt_max); S[h] <- exp(dt'·A[h])·S[h] + dt'·x ⊗ B; y = S[h]·C + D[h]·x. State
/// [H][P][N]. Throws std::invalid_argument when G does not divide H.
struct SsdArgs {
  const float* x = nullptr;
  int64_t x_t = 0, x_h = 0;
  const float* dt = nullptr;
  int64_t dt_t = 0, dt_h = 0;
  const float* A = nullptr;
  const float* B = nullptr;
  int64_t b_t = 0, b_g = 0;
  const float* C = nullptr;
  int64_t c_t = 0, c_g = 0;
  const float* D = nullptr;
  const float* dt_bias = nullptr;
  float* y = nullptr;
  int64_t y_t = 0, y_h = 0;
  int64_t heads = 0, head_dim = 0, groups = 0, state_dim = 0;
  bool dt_softplus = false;
  float dt_min = 0.f, dt_max = 0.f;
};
void ssd_scan(const SsdArgs& a, std::span<const RecurrentSeq> seqs, ScanForm form = ScanForm::automatic);

/// Mamba(1) selective scan. x, dt, z [Dm, T] with strides (channel, token) (*_d, *_t); A [Dm, N]
/// dense; B and C [G, T, N] dense (channel d reads group d / (Dm/G)); D, dt_bias [Dm] or null; z
/// null for none; y [Dm, T] (y_d, y_t). dt' = softplus?(dt + dt_bias); S[d] <- exp(dt'·A[d])·S[d]
/// + dt'·x[d]·B; y = (S[d]·C + D[d]·x) · silu(z). State [Dm][N].
struct SelectiveArgs {
  const float* x = nullptr;
  int64_t x_d = 0, x_t = 0;
  const float* dt = nullptr;
  int64_t dt_d = 0, dt_t = 0;
  const float* z = nullptr;
  int64_t z_d = 0, z_t = 0;
  const float* A = nullptr;
  const float* B = nullptr;
  const float* C = nullptr;
  const float* D = nullptr;
  const float* dt_bias = nullptr;
  float* y = nullptr;
  int64_t y_d = 0, y_t = 0;
  int64_t channels = 0, state_dim = 0, groups = 1, tokens = 0;  // tokens: T of B and C
  bool dt_softplus = false;
};
void selective_scan(const SelectiveArgs& a, std::span<const RecurrentSeq> seqs);

/// Gated delta rule. q, k [T, Hk, Dk] (token stride q_t / k_t, head stride q_h / k_h), v [T, Hv,
/// Dv] (v_t, v_h); g [T, Hv] (g_t, g_h) or, per_channel_g, [T, Hv, Dk] (g_t, g_h, unit channel
/// stride); beta [T, Hv] (beta_t, beta_h); out [T, Hv, Dv] (o_t, o_h). Head h reads q/k head
/// h / (Hv/Hk). q, k are l2-normalised (x·rsqrt(Σx² + 1e-6), transformers' l2norm) when
/// l2norm, q scaled by Dk^-0.5; S <- exp(g)·S (rows i by exp(g_i) for per-channel g); S <- S +
/// k ⊗ beta·(v - Sᵀk); o = Sᵀq. State [Hv][Dk][Dv]. Throws std::invalid_argument when Hk does not
/// divide Hv.
struct DeltaRuleArgs {
  const float* q = nullptr;
  int64_t q_t = 0, q_h = 0;
  const float* k = nullptr;
  int64_t k_t = 0, k_h = 0;
  const float* v = nullptr;
  int64_t v_t = 0, v_h = 0;
  const float* g = nullptr;
  int64_t g_t = 0, g_h = 0;
  const float* beta = nullptr;
  int64_t beta_t = 0, beta_h = 0;
  float* out = nullptr;
  int64_t o_t = 0, o_h = 0;
  int64_t k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
  bool per_channel_g = false;
  bool l2norm = false;
};
void gated_delta_rule(const DeltaRuleArgs& a, std::span<const RecurrentSeq> seqs,
                      ScanForm form = ScanForm::automatic);

/// Decayed softmax scan (a per-channel softmax over the past with a linear decay in distance; the
/// WKV recurrence of receptance-weighted models). k, v [T, C] (token strides k_t, v_t, unit
/// channel stride), w, u [C], out [T, C] (o_t). For each channel c:
///   out[t] = sum_{s<=t} e^{l(t,s)} v[s] / sum_{s<=t} e^{l(t,s)},
///   l(t,s) = k[s] + (t-1-s)·w[c] for s < t (w: the log decay per token), l(t,t) = k[t] + u[c].
/// Computed with a running maximum (transformers' rwkv_linear_attention_cpu): the state [3][C] is
/// num, den and their common exponent m (num = sum e^{l - m} v over the past, den likewise, both as
/// the next token sees them before its own decay step); a fresh state is num = den = 0, m = -1e38.
/// Throws std::invalid_argument for null pointers or channels < 1.
struct SoftmaxScanArgs {
  const float* k = nullptr;
  int64_t k_t = 0;
  const float* v = nullptr;
  int64_t v_t = 0;
  const float* w = nullptr;
  const float* u = nullptr;
  float* out = nullptr;
  int64_t o_t = 0;
  int64_t channels = 0;
};
/// The initial exponent of a fresh decayed-softmax state (the reference's -1e38).
inline constexpr float kSoftmaxScanFreshMax = -1e38f;
void decay_softmax_scan(const SoftmaxScanArgs& a, std::span<const RecurrentSeq> seqs);

/// Diagonal linear scan (a first-order elementwise recurrence with a per-token decay; RG-LRU's
/// form). a, b [T, C] (token strides a_t, b_t, unit channel stride), out [T, C] (o_t). For each
/// channel c: h[t] = a[t]·h[t-1] + b[t], out[t] = h[t], h[-1] from the state [C] (zeros for a fresh
/// sequence); the state holds h after the sequence's last token. Sequential in the tokens: each
/// block of channels keeps its h in registers over the sequence's new tokens (a prompt or one
/// decode step alike). Throws std::invalid_argument for null pointers or channels < 1.
struct LinearScanArgs {
  const float* a = nullptr;
  int64_t a_t = 0;
  const float* b = nullptr;
  int64_t b_t = 0;
  float* out = nullptr;
  int64_t o_t = 0;
  int64_t channels = 0;
};
void linear_scan(const LinearScanArgs& a, std::span<const RecurrentSeq> seqs);

}  // namespace fuselm::kernels
