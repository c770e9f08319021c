// Cases for the stateful ops (recurrent_ops.cc, docs/recurrent.md), added to the op table of
// runtime_ops_test.cc: each runs the op in a hand-made graph over a batch of three sequences (a
// new one whose slot holds garbage, one resuming from a state after earlier tokens, one decode
// step) and compares the output and the states written back with double-precision recurrences
// written here from the ops' documented semantics (python/fuselm_capture/recurrent_ops.py).
// Also: the one-line errors without a state cache or a slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv/state_cache.h"
#include "runtime_test_util.h"

namespace fuselm::runtime::testing {
namespace runtime_recurrent_ops_test {

// Tokens of the three sequences (first, count, earlier tokens): a prompt from zero state, a chunk
// resuming after 7 tokens, a decode step after 19.
struct Seq {
  int64_t first, count, before;
};
const std::vector<Seq> kSeqs = {{0, 5, 0}, {5, 3, 7}, {8, 1, 19}};
constexpr int64_t kT = 9;

/// A state cache of one state of `floats` per slot: slot 0 garbage (NaN; the new sequence must
/// not read it), slots 1 and 2 random (the resumed sequences' states).
kv::StateCache make_states(int64_t floats) {
  kv::StateCache c({floats}, 3);
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int s = 0; s < 3; ++s)
    for (int64_t i = 0; i < floats; ++i) c.at(0, s)[i] = s == 0 ? NAN : u(rng);
  return c;
}

/// Runs g's output over kSeqs with `states`; returns the output.
Host run_batch(OpGraph& g, kv::StateCache& states) {
  std::vector<SequenceSlice> slices;
  for (size_t i = 0; i < kSeqs.size(); ++i)
    slices.push_back({kSeqs[i].first, kSeqs[i].count, kSeqs[i].before + kSeqs[i].count, nullptr,
                      static_cast<int32_t>(i)});
  Batch b;
  b.sequences = slices;
  b.state = &states;
  return g.run(b);
}

/// The states each sequence starts from (zeros for the new one), as doubles.
std::vector<std::vector<double>> start_states(kv::StateCache& c) {
  std::vector<std::vector<double>> s(kSeqs.size(), std::vector<double>(c.floats(0), 0.0));
  for (size_t i = 1; i < kSeqs.size(); ++i)
    for (int64_t j = 0; j < c.floats(0); ++j) s[i][j] = c.at(0, static_cast<int32_t>(i))[j];
  return s;
}

void expect_states(kv::StateCache& c, const std::vector<std::vector<double>>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[i].size(); ++j)
      if (std::fabs(c.at(0, static_cast<int32_t>(i))[j] - want[i][j]) > tol * (1 + std::fabs(want[i][j]))) {
        ADD_FAILURE() << "state of sequence " << i << " differs at " << j << ": " << c.at(0, static_cast<int32_t>(i))[j]
                      << " vs " << want[i][j];
        return;
      }
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double silu(double x) { return x / (1 + std::exp(-x)); }

// ---- causal conv1d: out[c,t] = silu(b[c] + Σ_j w[c,j]·win[t+j]), win = state ++ x --------------

// layout: x as a transposed view (channels unit-stride: the vector path) or contiguous [1, C, T]
// (the scalar path).
void conv_case(Layout layout) {
  const int64_t C = 5, K = 4;
  Host x = rand_host(DType::f32, {1, C, kT}, 1), w = rand_host(DType::f32, {C, K}, 2), b = rand_host(DType::f32, {C}, 3);
  kv::StateCache states = make_states(C * (K - 1));
  auto st = start_states(states);
  Host want{DType::f32, {1, C, kT}, std::vector<double>(C * kT)};
  for (size_t i = 0; i < kSeqs.size(); ++i)
    for (int64_t c = 0; c < C; ++c) {
      std::vector<double> win;  // the state is [K-1][C], oldest input first
      for (int64_t j = 0; j < K - 1; ++j) win.push_back(st[i][j * C + c]);
      for (int64_t t = 0; t < kSeqs[i].count; ++t) win.push_back(at(x, {0, c, kSeqs[i].first + t}));
      for (int64_t t = 0; t < kSeqs[i].count; ++t) {
        double acc = at(b, {c});
        for (int64_t j = 0; j < K; ++j) acc += at(w, {c, j}) * win[t + j];
        want.v[c * kT + kSeqs[i].first + t] = silu(acc);
      }
      for (int64_t j = 0; j < K - 1; ++j) st[i][j * C + c] = win[win.size() - (K - 1) + j];
    }
  OpGraph g;
  int xn = g.input(x, layout), wn = g.input(w), bn = g.input(b);
  g.output(g.op("fuselm.causal_conv1d.default", {R(xn), R(wn), R(bn), S("silu"), I(0)}, DType::f32, {1, C, kT}));
  expect_close(run_batch(g, states), want, 1e-5, 1e-5);
  expect_states(states, st, 1e-6);
}

// ---- SSD: S <- exp(dt·A)·S + dt·x ⊗ B; y = S·C + D·x ------------------------------------------

void ssd_case() {
  const int64_t H = 4, P = 3, G = 2, N = 5;
  Host x = rand_host(DType::f32, {1, kT, H, P}, 11), dt = rand_host(DType::f32, {1, kT, H}, 12);
  Host A = rand_host(DType::f32, {H}, 13, -1.5, -0.1), Bm = rand_host(DType::f32, {1, kT, G, N}, 14);
  Host Cm = rand_host(DType::f32, {1, kT, G, N}, 15), D = rand_host(DType::f32, {H}, 16);
  Host bias = rand_host(DType::f32, {H}, 17);
  const double dt_min = 0.05, dt_max = 1.5;
  kv::StateCache states = make_states(H * P * N);
  auto st = start_states(states);
  Host want{DType::f32, x.shape, std::vector<double>(x.numel())};
  for (size_t i = 0; i < kSeqs.size(); ++i)
    for (int64_t t = kSeqs[i].first; t < kSeqs[i].first + kSeqs[i].count; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t gi = h / (H / G);
        const double d = std::clamp(softplus(at(dt, {0, t, h}) + at(bias, {h})), dt_min, dt_max);
        for (int64_t p = 0; p < P; ++p) {
          double y = at(D, {h}) * at(x, {0, t, h, p});
          for (int64_t n = 0; n < N; ++n) {
            double& s = st[i][(h * P + p) * N + n];
            s = std::exp(d * at(A, {h})) * s + d * at(x, {0, t, h, p}) * at(Bm, {0, t, gi, n});
            y += s * at(Cm, {0, t, gi, n});
          }
          want.v[((t * H) + h) * P + p] = y;
        }
      }
  OpGraph g;
  // B arrives as a transposed view ([1, T, N, G] stored): the op must copy it to read rows of N.
  int xn = g.input(x), dtn = g.input(dt), an = g.input(A), bn = g.input(Bm, Layout::transposed);
  int cn = g.input(Cm), dn = g.input(D), biasn = g.input(bias);
  g.output(g.op("fuselm.ssd_scan.default",
                {R(xn), R(dtn), R(an), R(bn), R(cn), R(dn), R(biasn), B(true), F(dt_min), F(dt_max), I(0)},
                DType::f32, x.shape));
  expect_close(run_batch(g, states), want, 1e-4, 1e-5);
  expect_states(states, st, 1e-5);
}

// ---- selective scan: S[d] <- exp(dt·A[d])·S[d] + dt·x·B; y = (S·C + D·x)·silu(z) ----------------

void selective_case() {
  const int64_t Dm = 6, N = 4;
  Host x = rand_host(DType::f32, {1, Dm, kT}, 21), dt = rand_host(DType::f32, {1, Dm, kT}, 22);
  Host A = rand_host(DType::f32, {Dm, N}, 23, -1.5, -0.1), Bm = rand_host(DType::f32, {1, N, kT}, 24);
  Host Cm = rand_host(DType::f32, {1, N, kT}, 25), D = rand_host(DType::f32, {Dm}, 26);
  Host z = rand_host(DType::f32, {1, Dm, kT}, 27), bias = rand_host(DType::f32, {Dm}, 28);
  kv::StateCache states = make_states(Dm * N);
  auto st = start_states(states);
  Host want{DType::f32, x.shape, std::vector<double>(x.numel())};
  for (size_t i = 0; i < kSeqs.size(); ++i)
    for (int64_t t = kSeqs[i].first; t < kSeqs[i].first + kSeqs[i].count; ++t)
      for (int64_t d = 0; d < Dm; ++d) {
        const double dl = softplus(at(dt, {0, d, t}) + at(bias, {d}));
        double y = at(D, {d}) * at(x, {0, d, t});
        for (int64_t n = 0; n < N; ++n) {
          double& s = st[i][d * N + n];
          s = std::exp(dl * at(A, {d, n})) * s + dl * at(x, {0, d, t}) * at(Bm, {0, n, t});
          y += s * at(Cm, {0, n, t});
        }
        want.v[d * kT + t] = y * silu(at(z, {0, d, t}));
      }
  OpGraph g;
  int xn = g.input(x, Layout::transposed), dtn = g.input(dt, Layout::strided), an = g.input(A);
  int bn = g.input(Bm, Layout::transposed), cn = g.input(Cm), dn = g.input(D), zn = g.input(z), biasn = g.input(bias);
  g.output(g.op("fuselm.selective_scan.default",
                {R(xn), R(dtn), R(an), R(bn), R(cn), R(dn), R(zn), R(biasn), B(true), I(0)}, DType::f32, x.shape));
  expect_close(run_batch(g, states), want, 1e-4, 1e-5);
  expect_states(states, st, 1e-5);
}

// ---- gated delta rule: S <- e^g·S; S <- S + k ⊗ β(v - Sᵀk); o = Sᵀq (q, k l2-normalised) -----

void delta_case(bool per_channel) {
  const int64_t Hk = 2, Hv = 4, Dk = 5, Dv = 3;
  Host q = rand_host(DType::f32, {1, kT, Hk, Dk}, 31), k = rand_host(DType::f32, {1, kT, Hk, Dk}, 32);
  Host v = rand_host(DType::f32, {1, kT, Hv, Dv}, 33), beta = rand_host(DType::f32, {1, kT, Hv}, 34, 0.0, 1.0);
  Host gg = per_channel ? rand_host(DType::f32, {1, kT, Hv, Dk}, 35, -1.0, 0.0) : rand_host(DType::f32, {1, kT, Hv}, 35, -1.0, 0.0);
  kv::StateCache states = make_states(Hv * Dk * Dv);
  auto st = start_states(states);
  Host want{DType::f32, v.shape, std::vector<double>(v.numel())};
  auto unit = [&](const Host& a, int64_t t, int64_t h, double scale) {
    std::vector<double> r(Dk);
    double ss = 0;
    for (int64_t i = 0; i < Dk; ++i) ss += at(a, {0, t, h, i}) * at(a, {0, t, h, i});
    for (int64_t i = 0; i < Dk; ++i) r[i] = at(a, {0, t, h, i}) / std::sqrt(ss + 1e-6) * scale;
    return r;
  };
  for (size_t s = 0; s < kSeqs.size(); ++s)
    for (int64_t t = kSeqs[s].first; t < kSeqs[s].first + kSeqs[s].count; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t kh = h / (Hv / Hk);
        const auto qn = unit(q, t, kh, 1 / std::sqrt(double(Dk))), kn = unit(k, t, kh, 1.0);
        double* S = st[s].data() + h * Dk * Dv;
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] *= std::exp(per_channel ? at(gg, {0, t, h, i}) : at(gg, {0, t, h}));
        for (int64_t j = 0; j < Dv; ++j) {
          double kv = 0;
          for (int64_t i = 0; i < Dk; ++i) kv += S[i * Dv + j] * kn[i];
          const double delta = at(beta, {0, t, h}) * (at(v, {0, t, h, j}) - kv);
          double o = 0;
          for (int64_t i = 0; i < Dk; ++i) o += (S[i * Dv + j] += kn[i] * delta) * qn[i];
          want.v[((t * Hv) + h) * Dv + j] = o;
        }
      }
  OpGraph g;
  int qn = g.input(q), kn = g.input(k), vn = g.input(v, Layout::strided), gn = g.input(gg), bn = g.input(beta);
  g.output(g.op("fuselm.gated_delta_rule.default", {R(qn), R(kn), R(vn), R(gn), R(bn), B(true), I(0)}, DType::f32,
                v.shape));
  expect_close(run_batch(g, states), want, 1e-4, 1e-5);
  expect_states(states, st, 1e-5);
}

// ---- decayed softmax scan: y = (past + e^{k+u}·v) / (its weights + e^{k+u}); past·e^w + e^k·v --------

void softmax_scan_case() {
  const int64_t C = 5;
  Host k = rand_host(DType::f32, {1, kT, C}, 51, -4.0, 4.0), v = rand_host(DType::f32, {1, kT, C}, 52);
  Host w = rand_host(DType::f32, {C}, 53, -2.0, -0.1), u = rand_host(DType::f32, {C}, 54);
  kv::StateCache states = make_states(3 * C);
  for (int32_t s = 1; s < 3; ++s)  // a resumed state's weights sum (den) is positive
    for (int64_t c = 0; c < C; ++c) states.at(0, s)[C + c] = std::fabs(states.at(0, s)[C + c]) + 0.5f;
  auto st = start_states(states);
  for (int64_t c = 0; c < C; ++c) st[0][2 * C + c] = -1e38;  // a fresh state: num = den = 0, m = -1e38
  Host want{DType::f32, k.shape, std::vector<double>(k.numel())};
  // The running-maximum recurrence as the state layout defines it (num, den relative to e^m).
  for (size_t i = 0; i < kSeqs.size(); ++i)
    for (int64_t t = kSeqs[i].first; t < kSeqs[i].first + kSeqs[i].count; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double &num = st[i][c], &den = st[i][C + c], &m = st[i][2 * C + c];
        const double kk = at(k, {0, t, c}), vv = at(v, {0, t, c}), ku = kk + at(u, {c});
        const double mo = std::max(m, ku);
        want.v[t * C + c] = (std::exp(m - mo) * num + std::exp(ku - mo) * vv) / (std::exp(m - mo) * den + std::exp(ku - mo));
        const double md = m + at(w, {c}), mn = std::max(md, kk);
        num = std::exp(md - mn) * num + std::exp(kk - mn) * vv;
        den = std::exp(md - mn) * den + std::exp(kk - mn);
        m = mn;
      }
  OpGraph g;
  int kn = g.input(k), vn = g.input(v, Layout::strided), wn = g.input(w), un = g.input(u);
  g.output(g.op("fuselm.decay_softmax_scan.default", {R(kn), R(vn), R(wn), R(un), I(0)}, DType::f32, k.shape));
  expect_close(run_batch(g, states), want, 1e-4, 1e-5);
  expect_states(states, st, 1e-5);
}

// ---- linear scan: h = a·h + b, y = h; a strided (a transposed view), its [C] state -----------------

void linear_scan_case() {
  const int64_t C = 6;
  Host a = rand_host(DType::f32, {1, kT, C}, 61, -1.2, 1.2), b = rand_host(DType::f32, {1, kT, C}, 62);
  kv::StateCache states = make_states(C);
  auto st = start_states(states);
  Host want{DType::f32, b.shape, std::vector<double>(b.numel())};
  for (size_t i = 0; i < kSeqs.size(); ++i)
    for (int64_t t = kSeqs[i].first; t < kSeqs[i].first + kSeqs[i].count; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double& h = st[i][c];
        h = at(a, {0, t, c}) * h + at(b, {0, t, c});
        want.v[t * C + c] = h;
      }
  OpGraph g;
  int an = g.input(a, Layout::strided), bn = g.input(b);
  g.output(g.op("fuselm.linear_scan.default", {R(an), R(bn), I(0)}, DType::f32, b.shape));
  expect_close(run_batch(g, states), want, 1e-5, 1e-5);
  expect_states(states, st, 1e-5);
}

// The errors: no state cache, a sequence without a slot; both name the op.
void expect_state_errors() {
  const int64_t C = 3, K = 2;
  OpGraph g;
  int xn = g.input(rand_host(DType::f32, {1, C, 2}, 41)), wn = g.input(rand_host(DType::f32, {C, K}, 42));
  g.output(g.op("fuselm.causal_conv1d.default", {R(xn), R(wn), None(), S("none"), I(0)}, DType::f32, {1, C, 2}));
  const SequenceSlice one{0, 2, 2, nullptr, -1};
  Batch b;
  b.sequences = {&one, 1};
  try {
    g.run(b);
    ADD_FAILURE() << "ran without a state cache";
  } catch (const std::exception& e) {
    EXPECT_CONTAINS(e.what(), "fuselm.causal_conv1d");
    EXPECT_CONTAINS(e.what(), "no recurrent state cache");
  }
  kv::StateCache states({C * (K - 1)}, 1);
  b.state = &states;
  try {
    g.run(b);
    ADD_FAILURE() << "ran a sequence without a slot";
  } catch (const std::exception& e) {
    EXPECT_CONTAINS(e.what(), "no state slot");
  }
}

}  // namespace runtime_recurrent_ops_test

void add_recurrent_cases(std::map<std::string, std::function<void()>>& m) {
  using namespace runtime_recurrent_ops_test;
  m["fuselm.causal_conv1d.default"] = [] {
    conv_case(Layout::transposed);
    conv_case(Layout::contiguous);
    expect_state_errors();
  };
  m["fuselm.ssd_scan.default"] = ssd_case;
  m["fuselm.selective_scan.default"] = selective_case;
  m["fuselm.gated_delta_rule.default"] = [] {
    delta_case(false);
    delta_case(true);
  };
  m["fuselm.decay_softmax_scan.default"] = softmax_scan_case;
  m["fuselm.linear_scan.default"] = linear_scan_case;
}

}  // namespace fuselm::runtime::testing
