// The recurrent kernels (kernels/cpu/recurrent/recurrent.h) on every ISA path: the chunked form
// (prefill) against the one-token form (decode) on lengths that do not fill a chunk, both against
// the generic path's one-token form, the state carried across calls (a prompt split in two calls,
// the second resuming from the first's state, equals one call), two sequences in one call, and
// the selective scan against a double-precision recurrence.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/recurrent/recurrent.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace {

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

INSTANTIATE_TEST_SUITE_P(, KernelsRecurrent, ::testing::ValuesIn(testing::all_isas()), testing::isa_param_name);

}  // namespace
}  // namespace fuselm::kernels
