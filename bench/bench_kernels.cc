// bench_kernels: machine ceilings and the CPU kernels measured against them.
//
//   memory bandwidth   1 GiB streamed by all threads (the ceiling of decode)
//   FMA peak           fp32 FMA chains on all threads (the ceiling of prefill)
//   GEMV               linear at m = 1 (and 4, 8; and the kn layout) on SmolLM2-135M shapes, f32
//                      and bf16 weights: GB/s of weights streamed and % of the measured bandwidth
//                      (weights cycled through copies totalling >= 1 GiB so that the last-level
//                      cache does not help)
//   decode token       all 30 layers' linears + LM head at m = 1, distinct weights: tokens/s
//   GEMM               linear at m = 300 (prefill): GFLOP/s and % of the FMA peak
//
// Usage: bench_kernels [--quick]   (FUSELM_CPU_ISA=generic|avx2|avx512|avx512vnni|avx512bf16|amx picks the kernel path;
// OMP_NUM_THREADS the threads.)
//        bench_kernels --tuning-ab SPEC... [--tokens N]
//                     the decode token (f32 and bf16 weights) under each FUSELM_CPU_TUNING spec
//                     (kernels/cpu/tuning.h, e.g. amd,gemv_streams=2), one token of each in turn
//                     N times (default 60), so that a shared host's drifting bandwidth slows every
//                     spec alike: median tokens/s per spec and its ratio to the first spec's.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/tuning.h"
#include "bench/probe.h"

namespace {

using namespace fuselm::kernels;
using namespace fuselm::bench;  // the machine probes

// SmolLM2-135M: hidden 576, intermediate 1536, 30 layers, 9 heads, 3 kv heads, head dim 64,
// vocab 49152; q|k|v and gate|up stacked as the engine runs them.
struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kQkv{"qkv", 576 + 2 * 192, 576};
constexpr Shape kO{"o", 576, 576};
constexpr Shape kGateUp{"gate_up", 2 * 1536, 576};
constexpr Shape kDown{"down", 576, 1536};
constexpr Shape kLmHead{"lm_head", 49152, 576};
constexpr int kLayers = 30;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A weight buffer filled in parallel (first touch spread over the threads) with a harmless value.
struct WeightBuffer {
  std::vector<unsigned char> bytes;
  WeightBuffer(size_t n_bytes, DType d) : bytes(n_bytes) {
    const uint16_t h = d == DType::bf16 ? f32_to_bf16(0.01f) : f32_to_f16(0.01f);
    const float f = 0.01f;
    const int64_t words = static_cast<int64_t>(n_bytes / 4);
    uint32_t word;
    if (d == DType::f32)
      std::memcpy(&word, &f, 4);
    else
      word = static_cast<uint32_t>(h) | (static_cast<uint32_t>(h) << 16);
    uint32_t* p = reinterpret_cast<uint32_t*>(bytes.data());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < words; ++i) p[i] = word;
  }
};

struct Result {
  double seconds_per_call;
  double bytes_per_call;
};

// Times linear(m, shape) cycling through enough weight copies to exceed the caches.
Result time_linear(const Shape& s, DType d, int64_t m, double min_seconds, size_t cycle_bytes,
                   WeightLayout layout = WeightLayout::nk) {
  const size_t w_bytes = static_cast<size_t>(s.n * s.k * dtype_size(d));
  const size_t copies = std::max<size_t>(1, (cycle_bytes + w_bytes - 1) / w_bytes);
  WeightBuffer w(w_bytes * copies, d);
  std::vector<float> x(static_cast<size_t>(m * s.k), 0.5f), y(static_cast<size_t>(m * s.n));
  auto call = [&](size_t c) {
    linear({.x = x.data(), .w = w.bytes.data() + c * w_bytes, .w_dtype = d, .w_layout = layout,
            .y = y.data(), .m = m, .n = s.n, .k = s.k});
  };
  for (size_t c = 0; c < std::min<size_t>(copies, 2); ++c) call(c);  // warm up threads, scratch
  int64_t calls = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < min_seconds || calls < 3) {
    call(static_cast<size_t>(calls) % copies);
    ++calls;
    t = now_s();
  }
  return {(t - t0) / static_cast<double>(calls), static_cast<double>(w_bytes)};
}

// One decode token's linears (30 layers + LM head), distinct weights per layer.
struct DecodeToken {
  std::vector<WeightBuffer> ws;
  std::vector<std::pair<Shape, const void*>> calls;
  std::vector<float> x = std::vector<float>(1536, 0.5f), y = std::vector<float>(49152);
  double bytes = 0;
  DType d;

  explicit DecodeToken(DType dtype) : d(dtype) {
    const Shape layer[] = {kQkv, kO, kGateUp, kDown};
    ws.reserve(kLayers * 4 + 1);
    for (int l = 0; l < kLayers; ++l)
      for (const Shape& s : layer) {
        ws.emplace_back(static_cast<size_t>(s.n * s.k * dtype_size(d)), d);
        calls.emplace_back(s, ws.back().bytes.data());
      }
    ws.emplace_back(static_cast<size_t>(kLmHead.n * kLmHead.k * dtype_size(d)), d);
    calls.emplace_back(kLmHead, ws.back().bytes.data());
    for (auto& [s, p] : calls) bytes += static_cast<double>(s.n * s.k * dtype_size(d));
  }
  void run() {
    for (auto& [s, p] : calls)
      linear({.x = x.data(), .w = p, .w_dtype = d, .y = y.data(), .m = 1, .n = s.n, .k = s.k});
  }
};

// --tuning-ab: one token per spec in turn, `tokens` times; the median seconds per spec.
void tuning_ab(const std::vector<std::string>& specs, int tokens) {
  const CpuVendor vendor = cpu_tuning().vendor;
  std::vector<CpuTuning> tunings;
  for (const std::string& spec : specs) tunings.push_back(parse_tuning(spec, vendor));
  for (DType d : {DType::f32, DType::bf16}) {
    DecodeToken token(d);
    std::vector<std::vector<double>> seconds(specs.size());
    for (int t = -1; t < tokens; ++t)
      for (size_t i = 0; i < specs.size(); ++i) {
        const size_t k = (i + static_cast<size_t>(t + 1)) % specs.size();  // rotate who goes first
        ScopedCpuTuning scoped(tunings[k]);
        const double t0 = now_s();
        token.run();
        if (t >= 0) seconds[k].push_back(now_s() - t0);
      }
    double first = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      std::vector<double>& v = seconds[i];
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      const double tps = 1 / v[v.size() / 2];
      if (i == 0) first = tps;
      fmt::print("{:<5} {:<48} {:>9.1f} tok/s {:>7.1f} GB/s {:>6.2f}x\n", dtype_name(d), specs[i], tps,
                 token.bytes * tps / 1e9, tps / first);
    }
  }
}

// bench_kernels --tuning-ab SPEC... [--tokens N]; exit status 2 on a bad spec or none.
int tuning_ab_main(int argc, char** argv) {
  std::vector<std::string> specs;
  int tokens = 60;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--tokens" && i + 1 < argc) tokens = std::max(1, std::atoi(argv[++i]));
    else specs.emplace_back(argv[i]);
  }
  if (specs.empty()) {
    fmt::print(stderr, "bench_kernels --tuning-ab: name at least one FUSELM_CPU_TUNING spec\n");
    return 2;
  }
  fmt::print("decode token under each tuning, {} threads, isa {}, {} tokens each, interleaved\n",
             omp_get_max_threads(), isa_name(cpu_isa()), tokens);
  try {
    tuning_ab(specs, tokens);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_kernels: {}\n", e.what());
    return 2;
  }
  return 0;
}

Result time_decode_token(DType d, double min_seconds) {
  DecodeToken decode(d);
  auto token = [&] { decode.run(); };
  token();
  int64_t n = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < min_seconds || n < 3) {
    token();
    ++n;
    t = now_s();
  }
  return {(t - t0) / static_cast<double>(n), decode.bytes};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--tuning-ab") return tuning_ab_main(argc, argv);
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const double min_s = quick ? 0.1 : 0.4;
  const size_t cycle = quick ? (size_t{256} << 20) : (size_t{1} << 30);

  fmt::print("fuselm kernels benchmark: isa {} (best {}), {} threads\n\n", isa_name(cpu_isa()),
             isa_name(detect_cpu_isa()), omp_get_max_threads());
  const double bw = measure_memory_bandwidth_gbs(quick ? (size_t{256} << 20) : (size_t{1} << 30));
  const double peak = measure_fma_peak_gflops();
  fmt::print("memory bandwidth (read, all threads): {:8.1f} GB/s\n", bw);
  fmt::print("fp32 FMA peak (all threads):          {:8.1f} GFLOP/s\n\n", peak);

  fmt::print("GEMV (decode, m rows; weights cycled through {} MiB of copies)\n", cycle >> 20);
  fmt::print("{:<8} {:>6} {:>6} {:>3} {:>5} {:>3} {:>9} {:>10} {:>8} {:>6}\n", "shape", "n", "k",
             "m", "dtype", "W", "MiB", "us/call", "GB/s", "%bw");
  const Shape shapes[] = {kQkv, kO, kGateUp, kDown, kLmHead};
  auto gemv_row = [&](const Shape& s, DType d, int64_t m, WeightLayout layout) {
    const Result r = time_linear(s, d, m, min_s, cycle, layout);
    const double gbs = r.bytes_per_call / r.seconds_per_call / 1e9;
    fmt::print("{:<8} {:>6} {:>6} {:>3} {:>5} {:>3} {:>9.2f} {:>10.1f} {:>8.1f} {:>5.0f}%\n", s.name,
               s.n, s.k, m, dtype_name(d), layout == WeightLayout::nk ? "nk" : "kn",
               r.bytes_per_call / (1 << 20), r.seconds_per_call * 1e6, gbs, 100 * gbs / bw);
  };
  for (DType d : {DType::f32, DType::bf16}) {
    for (const Shape& s : shapes) gemv_row(s, d, 1, WeightLayout::nk);
    gemv_row(kDown, d, 2, WeightLayout::nk);
    gemv_row(kDown, d, 4, WeightLayout::nk);  // batched decode
    gemv_row(kDown, d, 8, WeightLayout::nk);
    gemv_row(kDown, d, 1, WeightLayout::kn);  // GPT-2 Conv1D layout
    gemv_row(kGateUp, d, 1, WeightLayout::kn);
  }

  fmt::print("\ndecode token: {} layers x (qkv, o, gate_up, down) + lm_head at m = 1\n", kLayers);
  fmt::print("{:<5} {:>9} {:>10} {:>9} {:>8} {:>6}\n", "dtype", "MiB", "ms/token", "tokens/s",
             "GB/s", "%bw");
  for (DType d : {DType::f32, DType::bf16}) {
    const Result r = time_decode_token(d, min_s * 2);
    const double gbs = r.bytes_per_call / r.seconds_per_call / 1e9;
    fmt::print("{:<5} {:>9.1f} {:>10.3f} {:>9.1f} {:>8.1f} {:>5.0f}%\n", dtype_name(d),
               r.bytes_per_call / (1 << 20), r.seconds_per_call * 1e3, 1 / r.seconds_per_call,
               gbs, 100 * gbs / bw);
  }

  fmt::print("\nGEMM (prefill, m = 300)\n");
  fmt::print("{:<8} {:>6} {:>6} {:>5} {:>10} {:>9} {:>6}\n", "shape", "n", "k", "dtype",
             "ms/call", "GFLOP/s", "%peak");
  for (DType d : {DType::f32, DType::bf16}) {
    for (const Shape& s : shapes) {
      if (quick && s.name == kLmHead.name) continue;
      const Result r = time_linear(s, d, 300, min_s, 0);
      const double gflops = 2.0 * 300 * s.n * s.k / r.seconds_per_call / 1e9;
      fmt::print("{:<8} {:>6} {:>6} {:>5} {:>10.3f} {:>9.1f} {:>5.0f}%\n", s.name, s.n, s.k,
                 dtype_name(d), r.seconds_per_call * 1e3, gflops, 100 * gflops / peak);
    }
  }
  return 0;
}
