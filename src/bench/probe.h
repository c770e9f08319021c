#pragma once
// Machine probes: the ceilings that kernels are measured against, reusable by any benchmark
// (`fuselm bench`, bench/*.cc). Not kernels: they measure the machine, using the kernels' SIMD
// vectors (kernels/cpu/simd.h) and ISA path (cpu_isa()) so that they read as fast as kernels can.
//   memory bandwidth  for memory-bound kernels (decode GEMV, attention over a long cache)
//   FMA peak          for compute-bound kernels (prefill GEMM)
// Both use every thread the kernels may (-t / OMP_NUM_THREADS), on the kernels' thread pool
// (kernels/cpu/threading.h), and the widest vectors cpu_isa() allows.
#include <cstddef>

namespace fuselm::bench {

/// Streams a `bytes`-sized buffer (default 1 GiB) with all threads, each reading the part it first
/// touched, `repeats` passes as 4 interleaved streams per thread and `repeats` as one stream (the
/// faster order differs between CPUs); returns the best pass in GB/s (1e9 bytes per second).
/// Allocates and frees the buffer; takes about two seconds per GiB.
double measure_memory_bandwidth_gbs(size_t bytes = size_t{1} << 30, int repeats = 5);

/// Peak fp32 multiply-add rate with all threads (independent FMA chains in registers), in
/// GFLOP/s (an FMA counts 2). Runs about `seconds`.
double measure_fma_peak_gflops(double seconds = 0.3);

/// Sum of x[0..n) read as 4 interleaved streams with wide loads (`streams` = 4), or as one stream
/// (`streams` = 1): the bandwidth probe's two read loops. Other values throw std::invalid_argument.
float stream_sum_f32(const float* x, size_t n, int streams = 4);

}  // namespace fuselm::bench
