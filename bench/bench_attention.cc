// bench_attention: one decode step's attention over a deep KV cache, the part of a decoded token
// that grows with the depth, for each cache dtype (f32, bf16, q8_0) and thread count, as
// microseconds per layer and GB/s of KV bytes read (the figure decode at depth follows).
//
//   shape    SmolLM2-135M's by default: 9 q heads, 3 KV heads of 64 (--heads 32:4: TinyLlama's,
//            8 q heads per KV head); a cache of `depth` positions in
//            shuffled slots of 16-token blocks, one copy per layer (30 layers, cycled) so that the
//            last-level cache does not hold the rows between repetitions
//
// Usage: bench_attention [--depth N] [--heads HQ:HKV] [--reps N] [--threads 1,2] [--isa NAME]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant.h"

namespace {

using fuselm::kernels::AttentionArgs;

int64_t kHq = 9, kHkv = 3;  // --heads
constexpr int64_t kD = 64, kLayers = 30, kBlock = 16;

struct Cache {
  std::string name;
  int64_t row_bytes = 0;  // per slot, K or V
  std::vector<std::vector<uint8_t>> k, v;  // per layer
};

// A cache of `slots` rows per layer holding random values in `dtype`.
Cache make_cache(const std::string& dtype, int64_t slots) {
  Cache c;
  c.name = dtype;
  const int64_t width = kHkv * kD;
  c.row_bytes = dtype == "f32" ? width * 4 : dtype == "bf16" ? width * 2 : kHkv * (kD / 32) * 34;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t l = 0; l < kLayers; ++l) {
    c.k.emplace_back(static_cast<size_t>(slots * c.row_bytes));
    c.v.emplace_back(static_cast<size_t>(slots * c.row_bytes));
    for (auto* buf : {&c.k.back(), &c.v.back()})
      for (int64_t s = 0; s < slots; ++s) {
        for (float& x : row) x = nd(rng);
        uint8_t* dst = buf->data() + s * c.row_bytes;
        if (dtype == "f32") {
          std::memcpy(dst, row.data(), row.size() * 4);
        } else if (dtype == "bf16") {
          auto* h = reinterpret_cast<uint16_t*>(dst);
          for (int64_t e = 0; e < width; ++e) h[e] = fuselm::kernels::f32_to_bf16(row[e]);
        } else {
          fuselm::kernels::quantize_row(fuselm::kernels::QuantType::q8_0, row.data(), dst, width);
        }
      }
  }
  return c;
}

// Microseconds per layer of one decode step (t = 1, K/V already in the cache), best of `reps`
// passes over all layers; `cpu_us`: the process's CPU time per layer over all passes (on a loaded
// machine, with one thread, the time the step needs when it runs).
double time_step(Cache& c, const std::vector<int32_t>& slots, int64_t depth, int reps, double* cpu_us = nullptr) {
  std::vector<float> q(kHq * kD, 0.1f), out(kHq * kD);
  AttentionArgs a;
  a.cache_bf16 = c.name == "bf16";
  a.cache_q8_0 = c.name == "q8_0";
  a.num_slots = static_cast<int64_t>(slots.size());
  a.slots = slots.data();
  a.ctx_len = depth, a.t = 1, a.q = q.data(), a.out = out.data();
  a.hq = kHq, a.hkv = kHkv, a.dqk = kD, a.dv = kD, a.scale = 0.125f;
  double best = 1e30;
  const std::clock_t c0 = std::clock();
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < kLayers; ++l) {
      a.k_cache = c.k[l].data(), a.v_cache = c.v[l].data();
      fuselm::kernels::attention(a);
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, us / kLayers);
  }
  if (cpu_us) *cpu_us = 1e6 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / (reps * kLayers);
  return best;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  for (size_t b = 0; b <= s.size();) {
    const size_t e = std::min(s.find(',', b), s.size());
    v.push_back(std::stoi(s.substr(b, e - b)));
    b = e + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t depth = 4096;
  int reps = 20;
  std::vector<int> threads{1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--depth") depth = std::stoll(v);
    else if (f == "--reps") reps = std::stoi(v);
    else if (f == "--threads") threads = parse_list(v);
    else if (f == "--heads") {
      const std::vector<int> h = parse_list(std::string(v).replace(v.find(':') == std::string::npos ? v.size() : v.find(':'), 1, ","));
      if (h.size() != 2 || h[1] <= 0 || h[0] % h[1] != 0) return fmt::print(stderr, "--heads HQ:HKV, HQ a multiple of HKV\n"), 2;
      kHq = h[0], kHkv = h[1];
    }
    else if (f == "--isa") setenv("FUSELM_CPU_ISA", v.c_str(), 1);
    else return fmt::print(stderr, "unknown option {}\n", f), 2;
  }
  const int64_t slots_n = (depth + kBlock - 1) / kBlock * kBlock;
  // Whole 16-slot blocks in a shuffled order, as a paged cache hands them out.
  std::vector<int32_t> blocks(static_cast<size_t>(slots_n / kBlock));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));
  std::vector<int32_t> slots;
  for (int32_t b : blocks)
    for (int64_t o = 0; o < kBlock; ++o) slots.push_back(static_cast<int32_t>(b * kBlock + o));
  fmt::print("bench_attention: decode step, {} q / {} KV heads of {}, depth {}, {} layers cycled, isa {}\n", kHq, kHkv, kD,
             depth, kLayers, fuselm::kernels::isa_name(fuselm::kernels::cpu_isa()));
  fmt::print("| cache | threads | us / layer | KV GB/s | 30 layers: ms / token | CPU us / layer (all threads) |\n"
             "|---|---|---|---|---|---|\n");
  for (const std::string dtype : {"f32", "bf16", "q8_0"}) {
    Cache c = make_cache(dtype, slots_n);
    for (int t : threads) {
      omp_set_num_threads(t);
      time_step(c, slots, depth, 2);  // warm-up (thread team, page faults)
      double cpu = 0;
      const double us = time_step(c, slots, depth, reps, &cpu);
      const double gbs = 2.0 * depth * c.row_bytes / (us * 1e3);
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.1f} |\n", dtype, t, us, gbs, us * kLayers / 1e3, cpu);
    }
  }
  return 0;
}
