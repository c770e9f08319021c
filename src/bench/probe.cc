#include "bench/probe.h"

#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "bench/probe_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "bench/probe_impl.h"

namespace fuselm::bench {

using kernels::Isa;
using kernels::Range;
using kernels::split_range;

const ProbeKernels kProbeKernelsGeneric = make_probe_kernels<Isa::generic>();

namespace {

const ProbeKernels& probe_kernels() {
  return kernels::isa_kernels<kProbeKernelsGeneric, kProbeKernelsAvx2, kProbeKernelsAvx512>(kernels::cpu_isa());
}

}  // namespace

float stream_sum_f32(const float* x, size_t n) { return probe_kernels().stream_sum(x, n); }

double measure_memory_bandwidth_gbs(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float) / 64 * 64;
  if (n == 0) return 0.0;
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) throw std::bad_alloc();
  const int nt = std::max(1, omp_get_max_threads());
  const auto stream = probe_kernels().stream_sum;
#pragma omp parallel num_threads(nt)
  {
    const Range r = split_range(static_cast<int64_t>(n), omp_get_num_threads(), omp_get_thread_num(), 64);
    for (int64_t i = r.begin; i < r.end; ++i) buf[i] = 1.f;  // first touch by the reading thread
  }
  double best = 0.0;
  volatile float sink = 0.f;
  for (int rep = 0; rep < std::max(1, repeats); ++rep) {
    float total = 0.f;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      const Range r =
          split_range(static_cast<int64_t>(n), omp_get_num_threads(), omp_get_thread_num(), 64);
      total += stream(buf + r.begin, static_cast<size_t>(r.end - r.begin));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  (void)sink;
  std::free(buf);
  return best;
}

double measure_fma_peak_gflops(double seconds) {
  const int nt = std::max(1, omp_get_max_threads());
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
    double total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      double flops = 0;
      volatile float keep = chains(iters * 2, &flops);
      (void)keep;
      total += flops;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

}  // namespace fuselm::bench
