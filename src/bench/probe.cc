#include "bench/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "bench/probe_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "bench/probe_impl.h"
#include "isa/probe_tables.inc"

namespace fuselm::bench {

using kernels::Isa;
using kernels::Range;
using kernels::split_range;

const ProbeKernels kProbeKernelsGeneric = make_probe_kernels<Isa::generic>();

namespace {

const ProbeKernels& probe_kernels() {
  return kernels::isa_kernels<ProbeKernels>();
}

// Every thread the kernels may use (-t / OMP_NUM_THREADS): the probes measure the whole machine.
int probe_threads() { return kernels::kernel_threads(int64_t{1} << 40, 1); }

}  // namespace

float stream_sum_f32(const float* x, size_t n, int streams) {
  if (streams != 1 && streams != 4)
    throw std::invalid_argument("stream_sum_f32: streams must be 1 or 4");
  return streams == 1 ? probe_kernels().stream_sum_sequential(x, n) : probe_kernels().stream_sum(x, n);
}

double measure_memory_bandwidth_gbs(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float) / 64 * 64;
  if (n == 0) return 0.0;
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) throw std::bad_alloc();
  const int nt = probe_threads();
  const ProbeKernels& kern = probe_kernels();
  kernels::parallel_run(nt, [&](int part, int parts) {
    const Range r = split_range(static_cast<int64_t>(n), parts, part, 64);
    for (int64_t i = r.begin; i < r.end; ++i) buf[i] = 1.f;  // first touch by the reading thread
  });
  double best = 0.0;
  volatile float sink = 0.f;
  std::vector<float> sums(static_cast<size_t>(nt));
  for (int rep = 0; rep < 2 * std::max(1, repeats); ++rep) {  // each read order `repeats` times
    const auto stream = rep % 2 ? kern.stream_sum_sequential : kern.stream_sum;
    const auto t0 = std::chrono::steady_clock::now();
    kernels::parallel_run(nt, [&](int part, int parts) {  // the same split: each part reads what it touched
      const Range r = split_range(static_cast<int64_t>(n), parts, part, 64);
      sums[static_cast<size_t>(part)] = stream(buf + r.begin, static_cast<size_t>(r.end - r.begin));
    });
    float total = 0.f;
    for (float v : sums) total += v;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  (void)sink;
  std::free(buf);
  return best;
}

double measure_fma_peak_gflops(double seconds) {
  const int nt = probe_threads();
  const auto chains = probe_kernels().fma_chains;
  int64_t iters = 1 << 16;
  for (;;) {  // grow until one run takes a tenth of the time asked
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    volatile float keep = chains(iters, &flops);
    (void)keep;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > seconds / 10 || iters > (int64_t{1} << 40)) break;
    iters *= 2;
  }
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> flops(static_cast<size_t>(nt));
    const auto t0 = std::chrono::steady_clock::now();
    kernels::parallel_run(nt, [&](int part, int) {
      volatile float keep = chains(iters * 2, &flops[static_cast<size_t>(part)]);
      (void)keep;
    });
    double total = 0;
    for (double f : flops) total += f;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

}  // namespace fuselm::bench
