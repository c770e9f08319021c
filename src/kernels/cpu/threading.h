#pragma once
// Thread-count policy, range splitting and per-thread scratch buffers shared by the kernels
// (internal to src/kernels/cpu).
//
// Kernels split their own rows/columns over OpenMP threads. They never use more threads than
// omp_get_max_threads(), use fewer when the work is small, and run single-threaded when called
// from inside a parallel region (no nested oversubscription).
#include <omp.h>

#include <cstddef>
#include <cstdint>

namespace fuselm::kernels {

/// Threads to use for `work` units when each thread should get at least `min_work_per_thread`.
int kernel_threads(int64_t work, int64_t min_work_per_thread);

struct Range {
  int64_t begin, end;
};

/// Part `i` of `parts` near-equal contiguous parts of [0, n); inner boundaries are multiples of
/// `align` (the last part takes the remainder).
Range split_range(int64_t n, int parts, int i, int64_t align = 1);

/// Calls fn(begin, end) on `nt` threads for the parts of [0, n) (directly when nt <= 1).
template <class F>
void parallel_for_ranges(int nt, int64_t n, int64_t align, F&& fn) {
  if (nt <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const Range r = split_range(n, omp_get_num_threads(), omp_get_thread_num(), align);
    if (r.begin < r.end) fn(r.begin, r.end);
  }
}

/// A per-thread scratch buffer of at least `count` floats, 64-byte aligned. `slot` (0..7) names
/// independent buffers. Reallocated only when a thread asks for more than it ever did (contents
/// are then lost); never freed before the thread exits. Kernels use it for packing, so that the hot
/// path does not allocate.
float* thread_scratch(int slot, size_t count);

}  // namespace fuselm::kernels
