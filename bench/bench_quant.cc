// bench_quant: decode GEMV on quantized weights (quant_linear) next to the f32 / bf16 linear on
// the same shapes, on every ISA path, as GB/s of weight bytes streamed (the figure decode speed
// follows) and the memory bandwidth ceiling.
//
//   GEMV         m = 1 on SmolLM2-135M shapes and TinyLlama-1.1B shapes, weights cycled through
//                copies totalling >= the cycle size so that the last-level cache does not help
//   decode token SmolLM2-135M's 30 layers' linears + LM head at m = 1, distinct weights: tokens/s
//                of the linears alone (attention, norms and the rest excluded)
//   GEMM         m = 128 (prefill) on the 1.1B gate_up shape: GFLOP/s
// Block types as they lie in the GGUF (q8_0, ...) and, for q8_0, q4_0 and q4_1, repacked to the
// 16-row interleaved layout of quant_packed.h (q8_0x16, q4_0x16, q4_1x16).
//
// Usage: bench_quant [--quick] [--cpu-time] [--isa generic|avx2|avx512] [--only gemv|token|gemm] [--fmt NAME]...
//   (OMP_NUM_THREADS: threads; --only runs one section, --fmt keeps only those formats, e.g. q4_0x16)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear.h"
#include "bench/probe.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_packed.h"

namespace {

using namespace fuselm::kernels;
using namespace fuselm::bench;  // the machine probes

struct Shape {
  const char* name;
  int64_t n, k;
};
// SmolLM2-135M (hidden 576, intermediate 1536, 9/3 heads of 64, vocab 49152), q|k|v and gate|up
// stacked as the engine runs them; TinyLlama-1.1B (hidden 2048, intermediate 5632, 32/4 heads).
constexpr Shape kSmol[] = {{"qkv", 960, 576}, {"o", 576, 576}, {"gate_up", 3072, 576},
                           {"down", 576, 1536}, {"lm_head", 49152, 576}};
constexpr Shape kTiny[] = {{"1b.qkv", 2560, 2048}, {"1b.gate_up", 11264, 2048}, {"1b.down", 2048, 5632}};
constexpr int kSmolLayers = 30;

// A weight format: a plain dtype for linear, or a block type for quant_linear.
struct Format {
  std::optional<DType> dtype;
  std::optional<QuantType> quant;
  bool packed = false;  // QuantPacked (16-row interleaved), quant_linear_packed
  std::string name() const {
    return dtype ? std::string(dtype_name(*dtype)) : fmt::format("{}{}", quant_info(*quant).name, packed ? "x16" : "");
  }
  bool fits(const Shape& s) const { return dtype || s.k % quant_info(*quant).block_elems == 0; }
  int64_t bytes(const Shape& s) const {
    return dtype ? s.n * s.k * dtype_size(*dtype) : s.n * quant_row_bytes(*quant, s.k);
  }
};

bool g_cpu_time = false;  // --cpu-time: process CPU seconds instead of wall seconds

// Seconds: wall, or (--cpu-time) the process's CPU time, which other processes on a shared machine
// disturb far less (with one thread it is the kernel's own time; with more it counts spinning too).
double now_s() {
  if (g_cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Weight bytes filled in parallel (first touch spread over the threads): plain values 0.01, or
// random block bytes (the kernels' speed does not depend on the codes) with f16 scales 0.01.
std::vector<unsigned char> make_weights(size_t bytes, const Format& f) {
  std::vector<unsigned char> w(bytes);
  const int64_t words = static_cast<int64_t>(bytes / 4);
  uint32_t word = 0x3c003c00u;
  if (f.dtype == DType::f32) {
    const float v = 0.01f;
    std::memcpy(&word, &v, 4);
  } else if (f.dtype == DType::bf16) {
    word = f32_to_bf16(0.01f) * 0x10001u;
  }
  auto* p = reinterpret_cast<uint32_t*>(w.data());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < words; ++i) p[i] = f.dtype ? word : static_cast<uint32_t>(i * 2654435761u) & 0x3bff3bffu;
  return w;
}

void run(const Format& f, const Shape& s, int64_t m, const void* w, const float* x, float* y) {
  if (f.packed)
    quant_linear_packed(*static_cast<const QuantPacked*>(w), x, 0, nullptr, y, 0, m);
  else if (f.dtype)
    linear({.x = x, .w = w, .w_dtype = *f.dtype, .y = y, .m = m, .n = s.n, .k = s.k});
  else
    quant_linear({.x = x, .w = w, .w_type = *f.quant, .y = y, .m = m, .n = s.n, .k = s.k});
}

// Seconds per call of m rows through `s`, cycling through enough copies to exceed `cycle` bytes.
double time_call(const Format& f, const Shape& s, int64_t m, double min_s, size_t cycle) {
  const size_t wb = static_cast<size_t>(f.bytes(s));
  const size_t copies = std::max<size_t>(1, (cycle + wb - 1) / wb);
  const auto w = make_weights(wb * copies, f);
  std::vector<QuantPacked> packed;
  if (f.packed)
    for (size_t c = 0; c < copies; ++c) packed.push_back(QuantPacked::pack(*f.quant, w.data() + c * wb, 0, s.n, s.k));
  auto weights = [&](size_t c) -> const void* { return f.packed ? static_cast<const void*>(&packed[c]) : w.data() + c * wb; };
  std::vector<float> x(static_cast<size_t>(m * s.k), 0.5f), y(static_cast<size_t>(m * s.n));
  for (size_t c = 0; c < std::min<size_t>(copies, 2); ++c) run(f, s, m, weights(c), x.data(), y.data());
  int64_t calls = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < min_s || calls < 3) {
    run(f, s, m, weights(static_cast<size_t>(calls) % copies), x.data(), y.data());
    ++calls;
    t = now_s();
  }
  return (t - t0) / static_cast<double>(calls);
}

// SmolLM2's linears for one token, distinct weights per layer: seconds per token, bytes.
std::pair<double, double> time_token(const Format& f, double min_s) {
  std::vector<std::vector<unsigned char>> ws;
  std::vector<QuantPacked> packed;
  std::vector<std::pair<Shape, const void*>> calls;
  double bytes = 0;
  ws.reserve((kSmolLayers + 1) * 5);
  packed.reserve((kSmolLayers + 1) * 5);
  for (int l = 0; l <= kSmolLayers; ++l)
    for (const Shape& s : kSmol) {
      if ((l == kSmolLayers) != (std::string(s.name) == "lm_head")) continue;
      ws.push_back(make_weights(static_cast<size_t>(f.bytes(s)), f));
      if (f.packed) packed.push_back(QuantPacked::pack(*f.quant, ws.back().data(), 0, s.n, s.k));
      calls.emplace_back(s, f.packed ? static_cast<const void*>(&packed.back()) : ws.back().data());
      bytes += static_cast<double>(f.bytes(s));
    }
  std::vector<float> x(1536, 0.5f), y(49152);
  auto token = [&] {
    for (auto& [s, p] : calls) run(f, s, 1, p, x.data(), y.data());
  };
  token();
  int64_t n = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < min_s || n < 3) {
    token();
    ++n;
    t = now_s();
  }
  return {(t - t0) / static_cast<double>(n), bytes};
}

std::vector<std::string> g_fmts;  // --fmt: the formats kept (all when empty)

std::vector<Format> formats() {
  std::vector<Format> all{{DType::f32, {}}, {DType::bf16, {}}};
  for (QuantType q : kAllQuantTypes) {
    all.push_back({{}, q});
    if (QuantPacked::packable(q)) all.push_back({{}, q, true});
  }
  std::vector<Format> out;
  for (const Format& f : all)
    if (g_fmts.empty() || std::find(g_fmts.begin(), g_fmts.end(), f.name()) != g_fmts.end()) out.push_back(f);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<Isa> isas;
  std::string only;
  std::vector<std::string> fmts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    if (a == "--cpu-time") g_cpu_time = true;
    if (a == "--only" && i + 1 < argc) only = argv[++i];
    if (a == "--fmt" && i + 1 < argc) fmts.emplace_back(argv[++i]);
    if (a == "--isa" && i + 1 < argc) isas.push_back(parse_isa(argv[++i]).value_or(Isa::generic));
  }
  if (isas.empty())
    for (Isa isa : kAllIsas)
      if (cpu_supports(isa)) isas.push_back(isa);
  g_fmts = fmts;
  const double min_s = quick ? 0.05 : 0.25;
  const size_t cycle = quick ? (size_t{128} << 20) : (size_t{512} << 20);
  fmt::print("fuselm quantized GEMV benchmark: {} threads, weights cycled through {} MiB\n", omp_get_max_threads(),
             cycle >> 20);
  const double bw = measure_memory_bandwidth_gbs(cycle);
  fmt::print("memory bandwidth (read, all threads): {:.1f} GB/s\n\n", bw);

  if (only.empty() || only == "gemv") {
  fmt::print("GEMV m = 1: us/call and GB/s of weight bytes per ISA path (quant kernels: the level's path, "
             "quant_kernel_path(); * = an AVX-512 level without VNNI, the avx2 kernels)\n");
  fmt::print("{:<11} {:>6} {:>5} {:<7} {:>7}", "shape", "n", "k", "fmt", "MiB");
  for (Isa isa : isas) fmt::print(" | {:>16}", fmt::format("{} us  GB/s", isa_name(isa)));
  fmt::print("\n");
  std::vector<Shape> shapes(std::begin(kSmol), std::end(kSmol));
  shapes.insert(shapes.end(), std::begin(kTiny), std::end(kTiny));
  for (const Shape& s : shapes) {
    for (const Format& f : formats()) {
      if (!f.fits(s)) continue;  // K-quants need k % 256 == 0 (llama.cpp picks another type)
      fmt::print("{:<11} {:>6} {:>5} {:<7} {:>7.2f}", s.name, s.n, s.k, f.name(), f.bytes(s) / 1048576.0);
      for (Isa isa : isas) {
        ScopedCpuIsa scoped(isa);
        const double t = time_call(f, s, 1, isa == Isa::generic ? min_s / 4 : min_s, cycle);
        // an AVX-512 level without VNNI runs the quant kernels' avx2 path: mark it
        const bool fallback = f.quant && isa_has(isa, "avx512f") && std::string(quant_kernel_path()) == "avx2";
        fmt::print(" | {:>8.1f} {:>5.1f}{:<2}", t * 1e6, f.bytes(s) / t / 1e9, fallback ? " *" : "");
      }
      fmt::print("\n");
    }
  }

  }

  if (only.empty() || only == "token") {
  fmt::print("\ndecode token (SmolLM2-135M linears: {} layers + lm_head, m = 1), best ISA path {}\n", kSmolLayers,
             isa_name(isas.back()));
  fmt::print("{:<7} {:>8} {:>9} {:>9} {:>7} {:>5}\n", "fmt", "MiB", "ms/token", "tokens/s", "GB/s", "%bw");
  {
    ScopedCpuIsa scoped(isas.back());
    for (const Format& f : formats()) {
      if (!f.fits(kSmol[0])) continue;
      const auto [t, bytes] = time_token(f, min_s * 2);
      fmt::print("{:<7} {:>8.1f} {:>9.3f} {:>9.1f} {:>7.1f} {:>4.0f}%\n", f.name(), bytes / 1048576.0, t * 1e3, 1 / t,
                 bytes / t / 1e9, 100 * bytes / t / 1e9 / bw);
    }
  }

  }

  if (only.empty() || only == "gemm") {
  fmt::print("\nGEMM m = 128 on {} ({} x {}), best ISA path\n", kTiny[1].name, kTiny[1].n, kTiny[1].k);
  {
    ScopedCpuIsa scoped(isas.back());
    for (const Format& f : formats()) {
      const double t = time_call(f, kTiny[1], 128, min_s, 0);
      fmt::print("{:<7} {:>9.2f} ms {:>8.1f} GFLOP/s\n", f.name(), t * 1e3, 2.0 * 128 * kTiny[1].n * kTiny[1].k / t / 1e9);
    }
  }
  }
  return 0;
}
