// bench_moe: the fused experts kernel (kernels::experts) against the same experts computed
// densely, on a Qwen3-MoE-shaped block with random bf16 (or f32) weights.
//
//   shape       hidden 1024, moe_intermediate 512, 64 experts, top-8 (Qwen3-MoE's ratios, scaled
//               to ~200 MB of bf16 expert weights per block); --layers copies of the block so the
//               weights exceed the last-level cache
//   fused       kernels::experts: tokens grouped by expert, each active expert's GEMMs run once
//   dense       every expert on every token (one GEMM pair per expert over the whole batch),
//               results weighted by the router weight (0 for experts a token did not choose)
//   decode      1 token per step; prefill: --prefill tokens in one step; tokens/s of the blocks
//
// Usage: bench_moe [--layers N] [--prefill T] [--repeats R] [--dtype bf16|f32]
// Figures depend on the machine's load: run it on a quiet machine (bench/README.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe.h"

namespace {

using namespace fuselm::kernels;

constexpr int64_t kHidden = 1024, kInter = 512, kExperts = 64, kTopK = 8;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Block {
  std::vector<uint16_t> gate_up16, down16;
  std::vector<float> gate_up32, down32;
  const void* gate_up() const { return gate_up16.empty() ? static_cast<const void*>(gate_up32.data()) : gate_up16.data(); }
  const void* down() const { return down16.empty() ? static_cast<const void*>(down32.data()) : down16.data(); }
};

Block make_block(DType d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  Block b;
  const size_t n1 = static_cast<size_t>(kExperts * 2 * kInter * kHidden), n2 = static_cast<size_t>(kExperts * kHidden * kInter);
  if (d == DType::bf16) {
    b.gate_up16.resize(n1);
    b.down16.resize(n2);
    for (auto& w : b.gate_up16) w = f32_to_bf16(u(rng));
    for (auto& w : b.down16) w = f32_to_bf16(u(rng));
  } else {
    b.gate_up32.resize(n1);
    b.down32.resize(n2);
    for (auto& w : b.gate_up32) w = u(rng);
    for (auto& w : b.down32) w = u(rng);
  }
  return b;
}

// Routing of t tokens: top-8 distinct random experts with weights summing to 1.
void route(int64_t t, std::vector<int64_t>& ids, std::vector<float>& wts, uint32_t seed) {
  std::mt19937 rng(seed);
  ids.resize(t * kTopK);
  wts.resize(t * kTopK);
  std::vector<int64_t> all(kExperts);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t s = 0; s < kTopK; ++s) {
      ids[r * kTopK + s] = all[s];
      wts[r * kTopK + s] = 1.0f / kTopK;
    }
  }
}

void dense(const Block& b, DType d, const float* x, int64_t t, const std::vector<int64_t>& ids,
           const std::vector<float>& wts, float* y, std::vector<float>& gu, std::vector<float>& act,
           std::vector<float>& out) {
  const size_t es = static_cast<size_t>(dtype_size(d));
  std::fill_n(y, t * kHidden, 0.0f);
  for (int64_t e = 0; e < kExperts; ++e) {
    LinearArgs up;
    up.x = x;
    up.w = static_cast<const char*>(b.gate_up()) + static_cast<size_t>(e * 2 * kInter * kHidden) * es;
    up.w_dtype = d;
    up.y = gu.data();
    up.m = t;
    up.n = 2 * kInter;
    up.k = kHidden;
    linear(up);
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < kInter; ++j) {
        const float g = gu[r * 2 * kInter + j];
        act[r * kInter + j] = g / (1.0f + std::exp(-g)) * gu[r * 2 * kInter + kInter + j];
      }
    LinearArgs dn;
    dn.x = act.data();
    dn.w = static_cast<const char*>(b.down()) + static_cast<size_t>(e * kHidden * kInter) * es;
    dn.w_dtype = d;
    dn.y = out.data();
    dn.m = t;
    dn.n = kHidden;
    dn.k = kInter;
    linear(dn);
    for (int64_t r = 0; r < t; ++r) {
      float w = 0.0f;
      for (int64_t s = 0; s < kTopK; ++s)
        if (ids[r * kTopK + s] == e) w += wts[r * kTopK + s];
      for (int64_t c = 0; c < kHidden; ++c) y[r * kHidden + c] += w * out[r * kHidden + c];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 4, prefill = 256, repeats = 3;
  std::string dtype = "bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--layers") layers = std::stoi(argv[i + 1]);
    else if (a == "--prefill") prefill = std::stoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::stoi(argv[i + 1]);
    else if (a == "--dtype") dtype = argv[i + 1];
    else {
      fmt::print(stderr, "bench_moe: unknown option {}\n", a);
      return 2;
    }
  }
  if (dtype != "bf16" && dtype != "f32") {
    fmt::print(stderr, "bench_moe: --dtype must be bf16 or f32, not {}\n", dtype);
    return 2;
  }
  const DType d = dtype == "bf16" ? DType::bf16 : DType::f32;
  std::vector<Block> blocks;
  for (int l = 0; l < layers; ++l) blocks.push_back(make_block(d, 100 + l));
  const double mb = static_cast<double>(layers) * 3 * kExperts * kInter * kHidden * dtype_size(d) / 1e6;
  fmt::print("bench_moe: {} blocks of {} experts (hidden {}, intermediate {}, top-{}), {} weights, {:.0f} MB\n",
             layers, kExperts, kHidden, kInter, kTopK, dtype, mb);

  for (int64_t t : {int64_t{1}, static_cast<int64_t>(prefill)}) {
    std::vector<float> x(t * kHidden), y(t * kHidden), y2(t * kHidden), gu(t * 2 * kInter), act(t * kInter),
        out(t * kHidden);
    std::mt19937 rng(7);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<int64_t> ids;
    std::vector<float> wts;
    double best_fused = 1e30, best_dense = 1e30;
    const int steps = t == 1 ? 16 : 1;
    for (int rep = 0; rep < repeats; ++rep) {
      double t0 = now_s();
      for (int s = 0; s < steps; ++s)
        for (int l = 0; l < layers; ++l) {
          route(t, ids, wts, 1000 * rep + 10 * s + l);
          ExpertsArgs a;
          a.x = x.data();
          a.ids = ids.data();
          a.weights = wts.data();
          a.t = t;
          a.k = kTopK;
          a.h = kHidden;
          a.i = kInter;
          a.e = kExperts;
          a.gate_up = blocks[l].gate_up();
          a.down = blocks[l].down();
          a.w_dtype = d;
          a.y = y.data();
          experts(a);
        }
      best_fused = std::min(best_fused, (now_s() - t0) / steps);
      t0 = now_s();
      for (int s = 0; s < steps; ++s)
        for (int l = 0; l < layers; ++l) {
          route(t, ids, wts, 1000 * rep + 10 * s + l);
          dense(blocks[l], d, x.data(), t, ids, wts, y2.data(), gu, act, out);
        }
      best_dense = std::min(best_dense, (now_s() - t0) / steps);
    }
    double max_diff = 0, max_ref = 0;
    for (int64_t i = 0; i < t * kHidden; ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(y[i] - y2[i])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(y2[i])));
    }
    fmt::print("{:8} {:5} tokens: fused {:9.1f} tok/s   dense {:9.1f} tok/s   fused/dense {:6.1f}x   "
               "(max |fused - dense| {:.2g} of max {:.2g}, last step)\n",
               t == 1 ? "decode" : "prefill", t, t / best_fused, t / best_dense, best_dense / best_fused, max_diff,
               max_ref);
  }
  return 0;
}
