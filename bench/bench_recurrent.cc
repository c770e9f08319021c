// bench_recurrent: the recurrent kernels (kernels/cpu/recurrent/recurrent.h) at realistic sizes,
// as microseconds per decode step (one token of one sequence, one layer) and prefill tokens per
// second (one prompt of --prompt tokens, chunked form and one-token form), per thread count, and
// µs per batched decode step of 16 sequences (one token each, one call).
//
//   gdr        gated delta rule, Qwen3-Next-like: 16 key and 16 value heads, state 128 × 128
//   kda        the same with a per-key-channel decay (Kimi delta attention)
//   ssd        Mamba2 SSD scan: 64 heads of 64, state 128, 1 group
//   selective  Mamba(1) selective scan: 1536 channels, state 16
//   conv       causal depthwise conv1d: 8192 channels, width 4
//   linear     diagonal linear scan (RG-LRU): 2560 channels (RecurrentGemma-2B's lru_width); no
//              chunked form (both prefill columns run the one loop)
//
// Usage: bench_recurrent [--prompt N] [--reps N] [--threads 1,2] [--isa NAME]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/recurrent/recurrent.h"

namespace {

using namespace fuselm::kernels;  // NOLINT

constexpr int64_t kBatch = 16;  // sequences of the batched decode step

std::vector<float> randoms(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

/// Median seconds of `reps` calls of f (after one warm-up call).
double median_seconds(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// One kernel at one size: run(seqs, form) runs the sequences (token ranges of the prompt's inputs).
struct Case {
  std::string name;
  int64_t state_floats;
  std::function<void(std::span<const RecurrentSeq>, ScanForm)> run;
};

Case delta_case(int64_t T, bool per_channel) {
  const int64_t H = 16, D = 128;
  auto q = std::make_shared<std::vector<float>>(randoms(T * H * D, 1, -1, 1));
  auto k = std::make_shared<std::vector<float>>(randoms(T * H * D, 2, -1, 1));
  auto v = std::make_shared<std::vector<float>>(randoms(T * H * D, 3, -1, 1));
  auto g = std::make_shared<std::vector<float>>(randoms(T * H * (per_channel ? D : 1), 4, -0.5f, -0.01f));
  auto beta = std::make_shared<std::vector<float>>(randoms(T * H, 5, 0, 1));
  auto o = std::make_shared<std::vector<float>>(T * H * D);
  return {per_channel ? "kda" : "gdr", H * D * D, [=](std::span<const RecurrentSeq> seqs, ScanForm form) {
            DeltaRuleArgs a;
            a.q = q->data(), a.q_t = H * D, a.q_h = D;
            a.k = k->data(), a.k_t = H * D, a.k_h = D;
            a.v = v->data(), a.v_t = H * D, a.v_h = D;
            a.g = g->data(), a.g_t = H * (per_channel ? D : 1), a.g_h = per_channel ? D : 1;
            a.beta = beta->data(), a.beta_t = H, a.beta_h = 1;
            a.out = o->data(), a.o_t = H * D, a.o_h = D;
            a.k_heads = H, a.v_heads = H, a.k_dim = D, a.v_dim = D;
            a.per_channel_g = per_channel;
            a.l2norm = true;
            gated_delta_rule(a, seqs, form);
          }};
}

Case ssd_case(int64_t T) {
  const int64_t H = 64, P = 64, N = 128;
  auto x = std::make_shared<std::vector<float>>(randoms(T * H * P, 11, -1, 1));
  auto dt = std::make_shared<std::vector<float>>(randoms(T * H, 12, -3, 0));
  auto A = std::make_shared<std::vector<float>>(randoms(H, 13, -2, -0.5f));
  auto B = std::make_shared<std::vector<float>>(randoms(T * N, 14, -1, 1));
  auto C = std::make_shared<std::vector<float>>(randoms(T * N, 15, -1, 1));
  auto y = std::make_shared<std::vector<float>>(T * H * P);
  return {"ssd", H * P * N, [=](std::span<const RecurrentSeq> seqs, ScanForm form) {
            SsdArgs a;
            a.x = x->data(), a.x_t = H * P, a.x_h = P;
            a.dt = dt->data(), a.dt_t = H, a.dt_h = 1;
            a.A = A->data(), a.B = B->data(), a.b_t = N, a.C = C->data(), a.c_t = N;
            a.y = y->data(), a.y_t = H * P, a.y_h = P;
            a.heads = H, a.head_dim = P, a.groups = 1, a.state_dim = N;
            a.dt_softplus = true, a.dt_min = 0.f, a.dt_max = 1e30f;
            ssd_scan(a, seqs, form);
          }};
}

Case selective_case(int64_t T) {
  const int64_t Dm = 1536, N = 16;
  auto x = std::make_shared<std::vector<float>>(randoms(Dm * T, 21, -1, 1));
  auto dt = std::make_shared<std::vector<float>>(randoms(Dm * T, 22, -3, 0));
  auto A = std::make_shared<std::vector<float>>(randoms(Dm * N, 23, -2, -0.5f));
  auto B = std::make_shared<std::vector<float>>(randoms(T * N, 24, -1, 1));
  auto C = std::make_shared<std::vector<float>>(randoms(T * N, 25, -1, 1));
  auto y = std::make_shared<std::vector<float>>(Dm * T);
  return {"selective", Dm * N, [=](std::span<const RecurrentSeq> seqs, ScanForm) {
            SelectiveArgs a;
            a.x = x->data(), a.x_d = 1, a.x_t = Dm;
            a.dt = dt->data(), a.dt_d = 1, a.dt_t = Dm;
            a.A = A->data(), a.B = B->data(), a.C = C->data();
            a.y = y->data(), a.y_d = 1, a.y_t = Dm;
            a.channels = Dm, a.state_dim = N, a.tokens = T;
            a.dt_softplus = true;
            selective_scan(a, seqs);
          }};
}

Case conv_case(int64_t T) {
  const int64_t C = 8192, K = 4;
  auto x = std::make_shared<std::vector<float>>(randoms(C * T, 31, -1, 1));
  auto w = std::make_shared<std::vector<float>>(randoms(C * K, 32, -1, 1));
  auto o = std::make_shared<std::vector<float>>(C * T);
  return {"conv", C * (K - 1), [=](std::span<const RecurrentSeq> seqs, ScanForm) {
            Conv1dArgs a;
            a.x = x->data(), a.x_c = 1, a.x_t = C;  // [1, C, T] as the transposed [1, T, C] of models
            a.weight = w->data();
            a.out = o->data(), a.out_c = 1, a.out_t = C;
            a.channels = C, a.width = K, a.silu = true;
            causal_conv1d(a, seqs);
          }};
}

Case linear_case(int64_t T) {
  const int64_t C = 2560;
  auto a = std::make_shared<std::vector<float>>(randoms(C * T, 41, 0, 1));
  auto b = std::make_shared<std::vector<float>>(randoms(C * T, 42, -1, 1));
  auto o = std::make_shared<std::vector<float>>(C * T);
  return {"linear", C, [=](std::span<const RecurrentSeq> seqs, ScanForm) {
            LinearScanArgs la;
            la.a = a->data(), la.a_t = C, la.b = b->data(), la.b_t = C, la.out = o->data(), la.o_t = C;
            la.channels = C;
            linear_scan(la, seqs);
          }};
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::stoi(s.substr(pos, comma - pos)));
    pos = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t prompt = 512;
  int reps = 20;
  std::vector<int> threads = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--prompt") prompt = std::stoll(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--threads") threads = parse_list(v);
    else if (a == "--isa") setenv("FUSELM_CPU_ISA", v.c_str(), 1);
  }
  fmt::print("bench_recurrent: isa {}, prompt {} tokens, {} reps (median)\n", isa_name(cpu_isa()), prompt, reps);
  fmt::print("{:<10} {:>3} {:>14} {:>18} {:>20} {:>20}\n", "kernel", "thr", "decode us/step", "16-seq us/step",
             "prefill tok/s chunk", "prefill tok/s step");
  std::vector<Case> cases = {delta_case(prompt, false), delta_case(prompt, true), ssd_case(prompt),
                             selective_case(prompt), conv_case(prompt), linear_case(prompt)};
  for (const Case& c : cases) {
    std::vector<float> state = randoms(c.state_floats * kBatch, 99, -0.1f, 0.1f);
    std::vector<RecurrentSeq> batch;
    for (int64_t i = 0; i < kBatch; ++i) batch.push_back({i, 1, state.data() + i * c.state_floats, false});
    const RecurrentSeq one{0, 1, state.data(), false}, whole{0, prompt, state.data(), false};
    for (int nt : threads) {
      omp_set_num_threads(nt);
      const double decode = median_seconds(reps * 10, [&] { c.run({&one, 1}, ScanForm::step); });
      const double batched = median_seconds(reps * 4, [&] { c.run(batch, ScanForm::step); });
      const int pre_reps = std::max(3, reps / 4);
      // The two forms alternate, best of two medians each: whichever runs first is not penalised.
      double chunk = 1e30, step = 1e30;
      for (int round = 0; round < 2; ++round) {
        chunk = std::min(chunk, median_seconds(pre_reps, [&] { c.run({&whole, 1}, ScanForm::chunked); }));
        step = std::min(step, median_seconds(pre_reps, [&] { c.run({&whole, 1}, ScanForm::step); }));
      }
      fmt::print("{:<10} {:>3} {:>14.1f} {:>18.1f} {:>20.0f} {:>20.0f}\n", c.name, nt, decode * 1e6, batched * 1e6,
                 prompt / chunk, prompt / step);
    }
  }
  return 0;
}
