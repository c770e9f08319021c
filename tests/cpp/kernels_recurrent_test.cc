// The recurrent kernels (kernels/cpu/recurrent/recurrent.h) on every ISA path: the chunked form
// (prefill) against the one-token form (decode) on lengths that do not fill a chunk, both against
// the generic path's one-token form, the state carried across calls (a prompt split in two calls,
// the second resuming from the first's state, equals one call), two sequences in one call, and
// the selective scan against a double-precision recurrence.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/recurrent/recurrent.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_recurrent_test {

using testing::random_floats;

constexpr int64_t kLengths[] = {1, 5, 63, 64, 65, 130};

/// Max |a - b| / (1 + |b|) over the elements.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / (1 + std::fabs(double(b[i]))));
  return m;
}

class KernelsRecurrent : public ::testing::TestWithParam<Isa> {};

// ---- SSD ----------------------------------------------------------------------------------------

struct SsdData {
  int64_t T, H = 4, P = 12, G = 2, N = 40;
  std::vector<float> x, dt, A, B, C, D, bias;
  explicit SsdData(int64_t t) : T(t) {
    x = random_floats(T * H * P, 1);
    dt = random_floats(T * H, 2);
    A = random_floats(H, 3);
    for (float& a : A) a = -std::fabs(a) - 0.1f;
    B = random_floats(T * G * N, 4);
    C = random_floats(T * G * N, 5);
    D = random_floats(H, 6);
    bias = random_floats(H, 7);
  }
  /// y and the final state of tokens [0, split) then [split, T) in two calls (split = T: one).
  void run(ScanForm form, int64_t split, std::vector<float>& y, std::vector<float>& state) const {
    SsdArgs a;
    a.x = x.data(), a.x_t = H * P, a.x_h = P;
    a.dt = dt.data(), a.dt_t = H, a.dt_h = 1;
    a.A = A.data();
    a.B = B.data(), a.b_t = G * N, a.b_g = N;
    a.C = C.data(), a.c_t = G * N, a.c_g = N;
    a.D = D.data(), a.dt_bias = bias.data();
    y.assign(T * H * P, NAN);
    state.assign(H * P * N, NAN);
    a.y = y.data(), a.y_t = H * P, a.y_h = P;
    a.heads = H, a.head_dim = P, a.groups = G, a.state_dim = N;
    a.dt_softplus = true, a.dt_min = 0.f, a.dt_max = INFINITY;
    const RecurrentSeq first{0, split, state.data(), true};
    ssd_scan(a, {&first, 1}, form);
    if (split < T) {
      const RecurrentSeq rest{split, T - split, state.data(), false};
      ssd_scan(a, {&rest, 1}, form);
    }
  }
};

TEST_P(KernelsRecurrent, SsdChunkedEqualsSteps) {
  FUSELM_REQUIRE_ISA(GetParam());
  for (int64_t T : kLengths) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const SsdData d(T);
    std::vector<float> y0, s0, y, s;
    {
      ScopedCpuIsa generic(Isa::generic);
      d.run(ScanForm::step, T, y0, s0);
    }
    ScopedCpuIsa isa(GetParam());
    for (ScanForm form : {ScanForm::step, ScanForm::chunked}) {
      for (int64_t split : {T, (T + 1) / 2}) {
        d.run(form, split, y, s);
        EXPECT_LT(max_rel(y, y0), 2e-5) << "form " << int(form) << " split " << split;
        EXPECT_LT(max_rel(s, s0), 2e-5) << "form " << int(form) << " split " << split;
      }
    }
  }
}

// ---- gated delta rule ---------------------------------------------------------------------------

struct DeltaData {
  int64_t T, Hk = 2, Hv = 4, Dk, Dv;
  bool per_channel;
  std::vector<float> q, k, v, g, beta;
  /// decay: the scale of the log decays (3: strong enough per channel that a chunk's decay cannot
  /// be factored and its products are taken pair by pair).
  DeltaData(int64_t t, int64_t dk, int64_t dv, bool pc, float decay = 0.3f) : T(t), Dk(dk), Dv(dv), per_channel(pc) {
    q = random_floats(T * Hk * Dk, 11);
    k = random_floats(T * Hk * Dk, 12);
    v = random_floats(T * Hv * Dv, 13);
    g = random_floats(T * Hv * (pc ? Dk : 1), 14);
    for (float& x : g) x = -std::log1p(std::exp(x)) * decay;
    beta = random_floats(T * Hv, 15);
    for (float& b : beta) b = 1.f / (1.f + std::exp(-b));
  }
  /// Two sequences in one call: the whole length from zeros, and its second half from `start`.
  void run(ScanForm form, std::vector<float>& o, std::vector<float>& state, const std::vector<float>& start) const {
    DeltaRuleArgs a;
    a.q = q.data(), a.q_t = Hk * Dk, a.q_h = Dk;
    a.k = k.data(), a.k_t = Hk * Dk, a.k_h = Dk;
    a.v = v.data(), a.v_t = Hv * Dv, a.v_h = Dv;
    a.g = g.data(), a.g_t = Hv * (per_channel ? Dk : 1), a.g_h = per_channel ? Dk : 1;
    a.beta = beta.data(), a.beta_t = Hv, a.beta_h = 1;
    o.assign(T * Hv * Dv, NAN);
    a.out = o.data(), a.o_t = Hv * Dv, a.o_h = Dv;
    a.k_heads = Hk, a.v_heads = Hv, a.k_dim = Dk, a.v_dim = Dv;
    a.per_channel_g = per_channel;
    a.l2norm = true;
    const int64_t hs = Hv * Dk * Dv, half = T / 2;
    state.assign(2 * hs, NAN);
    std::copy(start.begin(), start.end(), state.begin() + hs);
    // seq 0: tokens [0, half) fresh; seq 1: tokens [half, T) from `start` (the same token batch)
    const RecurrentSeq seqs[2] = {{0, half, state.data(), true}, {half, T - half, state.data() + hs, false}};
    gated_delta_rule(a, seqs, form);
  }
};

TEST_P(KernelsRecurrent, DeltaRuleChunkedEqualsSteps) {
  FUSELM_REQUIRE_ISA(GetParam());
  for (auto [per_channel, decay] : {std::pair{false, 0.3f}, {true, 0.3f}, {true, 3.f}}) {
    for (auto [dk, dv] : {std::pair<int64_t, int64_t>{20, 36}, {64, 64}}) {
      for (int64_t T : kLengths) {
        SCOPED_TRACE(fmt::format("T={} Dk={} Dv={} per_channel={} decay={}", T, dk, dv, per_channel, decay));
        const DeltaData d(T, dk, dv, per_channel, decay);
        const std::vector<float> start = random_floats(d.Hv * dk * dv, 16, 0.3f);
        std::vector<float> o0, s0, o, s;
        {
          ScopedCpuIsa generic(Isa::generic);
          d.run(ScanForm::step, o0, s0, start);
        }
        ScopedCpuIsa isa(GetParam());
        for (ScanForm form : {ScanForm::step, ScanForm::chunked}) {
          d.run(form, o, s, start);
          EXPECT_LT(max_rel(o, o0), 5e-5) << "form " << int(form);
          EXPECT_LT(max_rel(s, s0), 5e-5) << "form " << int(form);
        }
      }
    }
  }
}

// ---- selective scan -----------------------------------------------------------------------------

TEST_P(KernelsRecurrent, SelectiveScanMatchesDoubleRecurrence) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const int64_t Dm = 10, N = 19, G = 2, T = 37;
  const auto x = random_floats(Dm * T, 21), z = random_floats(Dm * T, 23);
  auto dt = random_floats(Dm * T, 22);
  dt[0] = 25.f, dt[1] = -30.f, dt[T] = 19.9f, dt[T + 1] = 20.1f;  // softplus's threshold and tails
  auto A = random_floats(Dm * N, 24);
  for (float& a : A) a = -std::fabs(a);
  const auto B = random_floats(G * T * N, 25), C = random_floats(G * T * N, 26), D = random_floats(Dm, 27);
  std::vector<float> y(Dm * T), state(Dm * N);
  SelectiveArgs a;
  a.x = x.data(), a.x_d = T, a.x_t = 1;
  a.dt = dt.data(), a.dt_d = T, a.dt_t = 1;
  a.z = z.data(), a.z_d = T, a.z_t = 1;
  a.A = A.data(), a.B = B.data(), a.C = C.data(), a.D = D.data();
  a.y = y.data(), a.y_d = T, a.y_t = 1;
  a.channels = Dm, a.state_dim = N, a.groups = G, a.tokens = T;
  a.dt_softplus = true;
  const RecurrentSeq s{0, T, state.data(), true};
  selective_scan(a, {&s, 1});
  for (int64_t d = 0; d < Dm; ++d) {
    std::vector<double> S(N, 0.0);
    const int64_t gi = d / (Dm / G);
    for (int64_t t = 0; t < T; ++t) {
      const double dl = std::log1p(std::exp(double(dt[d * T + t]))), xv = x[d * T + t];
      double out = D[d] * xv;
      for (int64_t n = 0; n < N; ++n) {
        S[n] = std::exp(dl * A[d * N + n]) * S[n] + dl * xv * B[(gi * T + t) * N + n];
        out += S[n] * C[(gi * T + t) * N + n];
      }
      out *= z[d * T + t] / (1 + std::exp(-double(z[d * T + t])));
      ASSERT_NEAR(y[d * T + t], out, 1e-4 * (1 + std::fabs(out))) << "d=" << d << " t=" << t;
    }
    for (int64_t n = 0; n < N; ++n) ASSERT_NEAR(state[d * N + n], S[n], 1e-4 * (1 + std::fabs(S[n])));
  }
}

// ---- decayed softmax scan -------------------------------------------------------------------------

/// out[t][c] by the definition (recurrent.h), in double: a softmax over the past of each channel,
/// each term's exponent taken relative to the row's largest (no running state).
std::vector<double> softmax_scan_reference(const std::vector<float>& k, const std::vector<float>& v,
                                           const std::vector<float>& w, const std::vector<float>& u, int64_t T,
                                           int64_t C) {
  std::vector<double> out(T * C);
  std::vector<double> l(T);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < T; ++t) {
      double top = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        l[s] = s < t ? double(k[s * C + c]) + double(t - 1 - s) * w[c] : double(k[t * C + c]) + u[c];
        top = std::max(top, l[s]);
      }
      double num = 0, den = 0;
      for (int64_t s = 0; s <= t; ++s) {
        num += std::exp(l[s] - top) * v[s * C + c];
        den += std::exp(l[s] - top);
      }
      out[t * C + c] = num / den;
    }
  return out;
}

// Channels not filling a block (70 of 64-channel blocks), lengths not filling a block of tokens,
// keys large enough (|k| up to ~40) that exponents without the running maximum would overflow
// f32, and the state carried across calls (the prompt split in two; the second call resumes).
TEST(KernelsSoftmaxScan, MatchesDoubleDefinitionAcrossCalls) {
  constexpr int64_t C = 70;
  for (int64_t T : kLengths) {
    auto k = random_floats(T * C, 31, 12.f);
    const auto v = random_floats(T * C, 32);
    auto w = random_floats(C, 33);
    for (float& x : w) x = -std::exp(x);  // log decays, as exp of a learned value
    const auto u = random_floats(C, 34);
    const auto want = softmax_scan_reference(k, v, w, u, T, C);
    for (int64_t split : {T, T / 2, int64_t{1}}) {
      std::vector<float> out(T * C, NAN), state(3 * C, NAN);
      SoftmaxScanArgs a;
      a.k = k.data(), a.k_t = C, a.v = v.data(), a.v_t = C, a.w = w.data(), a.u = u.data();
      a.out = out.data(), a.o_t = C, a.channels = C;
      const RecurrentSeq first{0, split, state.data(), true}, rest{split, T - split, state.data(), false};
      decay_softmax_scan(a, {&first, 1});
      if (split < T) decay_softmax_scan(a, {&rest, 1});
      double err = 0;
      for (int64_t i = 0; i < T * C; ++i) err = std::max(err, std::fabs(out[i] - want[i]) / (1 + std::fabs(want[i])));
      EXPECT_LT(err, 2e-5) << "T=" << T << " split=" << split;
    }
  }
}

// Two sequences in one call, each from its own state: the same as each alone.
TEST(KernelsSoftmaxScan, SequencesInOneCallAreIndependent) {
  constexpr int64_t C = 5, T = 9;
  const auto k = random_floats(T * C, 41), v = random_floats(T * C, 42), u = random_floats(C, 44);
  std::vector<float> w(C, -0.5f);
  const auto want_a = softmax_scan_reference({k.begin(), k.begin() + 4 * C}, {v.begin(), v.begin() + 4 * C}, w, u, 4, C);
  const auto want_b = softmax_scan_reference({k.begin() + 4 * C, k.end()}, {v.begin() + 4 * C, v.end()}, w, u, 5, C);
  std::vector<float> out(T * C, NAN), sa(3 * C, NAN), sb(3 * C, NAN);
  SoftmaxScanArgs a;
  a.k = k.data(), a.k_t = C, a.v = v.data(), a.v_t = C, a.w = w.data(), a.u = u.data();
  a.out = out.data(), a.o_t = C, a.channels = C;
  const RecurrentSeq seqs[] = {{0, 4, sa.data(), true}, {4, 5, sb.data(), true}};
  decay_softmax_scan(a, seqs);
  for (int64_t i = 0; i < 4 * C; ++i) EXPECT_NEAR(out[i], want_a[i], 1e-5);
  for (int64_t i = 0; i < 5 * C; ++i) EXPECT_NEAR(out[4 * C + i], want_b[i], 1e-5);
  EXPECT_THROW(decay_softmax_scan(SoftmaxScanArgs{}, seqs), std::invalid_argument);
}

// ---- linear scan ----------------------------------------------------------------------------------

/// h[t] = a[t]·h[t-1] + b[t] per channel from h0, in double; out [T][C], h0 left as the last h.
std::vector<double> linear_scan_reference(const std::vector<float>& a, const std::vector<float>& b,
                                          std::vector<double>& h, int64_t T, int64_t C) {
  std::vector<double> out(T * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = h[c] = double(a[t * C + c]) * h[c] + b[t * C + c];
  return out;
}

// On every path: channels that fill no register block (70 = 4 blocks of 16 + 6, 2 on avx512's 64),
// the lengths of kLengths in one call (a prompt), split in two (the second resumes from the
// first's state), and one token per call (decode); decays of either sign up to |1|, output and
// state against the double recurrence. a is read through a token stride wider than C (a strided
// view, as a transposed tensor of the graph).
TEST_P(KernelsRecurrent, LinearScanMatchesDoubleRecurrence) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  constexpr int64_t C = 70, AT = 75;
  for (int64_t T : kLengths) {
    auto a = random_floats(T * AT, 51, 0.6f);
    for (float& x : a) x = std::clamp(x, -1.f, 1.f);
    const auto b = random_floats(T * C, 52);
    std::vector<float> dense(T * C);
    for (int64_t t = 0; t < T; ++t) std::copy_n(a.begin() + t * AT, C, dense.begin() + t * C);
    std::vector<double> h(C, 0.0);
    const auto want = linear_scan_reference(dense, b, h, T, C);
    for (int64_t step : {T, (T + 1) / 2, int64_t{1}}) {
      SCOPED_TRACE(fmt::format("T={} step={}", T, step));
      std::vector<float> out(T * C, NAN), state(C, NAN);
      LinearScanArgs la;
      la.a = a.data(), la.a_t = AT, la.b = b.data(), la.b_t = C, la.out = out.data(), la.o_t = C, la.channels = C;
      for (int64_t first = 0; first < T; first += step) {
        const RecurrentSeq s{first, std::min(step, T - first), state.data(), first == 0};
        linear_scan(la, {&s, 1});
      }
      double err = 0;
      for (int64_t i = 0; i < T * C; ++i) err = std::max(err, std::fabs(out[i] - want[i]) / (1 + std::fabs(want[i])));
      EXPECT_LT(err, 1e-5);
      double serr = 0;
      for (int64_t c = 0; c < C; ++c) serr = std::max(serr, std::fabs(state[c] - h[c]) / (1 + std::fabs(h[c])));
      EXPECT_LT(serr, 1e-5);
    }
  }
}

// Two sequences in one call, one new (its slot garbage), one resuming: each as alone; bad args throw.
TEST_P(KernelsRecurrent, LinearScanSequencesInOneCall) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  constexpr int64_t C = 9, T = 11;
  const auto a = random_floats(T * C, 61, 0.5f), b = random_floats(T * C, 62);
  std::vector<float> out(T * C, NAN), sa(C, NAN), sb = random_floats(C, 63);
  std::vector<double> ha(C, 0.0), hb(sb.begin(), sb.end());
  const auto want_a = linear_scan_reference({a.begin(), a.begin() + 4 * C}, {b.begin(), b.begin() + 4 * C}, ha, 4, C);
  const auto want_b = linear_scan_reference({a.begin() + 4 * C, a.end()}, {b.begin() + 4 * C, b.end()}, hb, 7, C);
  LinearScanArgs la;
  la.a = a.data(), la.a_t = C, la.b = b.data(), la.b_t = C, la.out = out.data(), la.o_t = C, la.channels = C;
  const RecurrentSeq seqs[] = {{0, 4, sa.data(), true}, {4, 7, sb.data(), false}};
  linear_scan(la, seqs);
  for (int64_t i = 0; i < 4 * C; ++i) EXPECT_NEAR(out[i], want_a[i], 1e-5);
  for (int64_t i = 0; i < 7 * C; ++i) EXPECT_NEAR(out[4 * C + i], want_b[i], 1e-5);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(sb[c], hb[c], 1e-5);
  EXPECT_THROW(linear_scan(LinearScanArgs{}, seqs), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(, KernelsRecurrent, ::testing::ValuesIn(testing::all_isas()), testing::isa_param_name);

}  // namespace kernels_recurrent_test
}  // namespace fuselm::kernels
