#pragma once
// Thread-count policy, range splitting, a persistent thread pool and per-thread scratch buffers
// shared by the kernels (internal to src/kernels/cpu).
//
// Kernels split their own rows/columns over the pool's threads. They never use more threads than
// omp_get_max_threads() (what -t / --threads and OMP_NUM_THREADS set), use fewer when the work is
// small, and run single-threaded when called from inside a parallel task or an OpenMP region (no
// nested oversubscription). The pool's workers live for the process: they spin briefly after a
// task (the next kernel usually follows within microseconds) and then sleep on a futex, so an
// idle or oversubscribed machine does not burn cores in a barrier the way libgomp's did.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fuselm::kernels {

/// Threads to use for `work` units when each thread should get at least `min_work_per_thread`:
/// between 1 and omp_get_max_threads(); 1 inside a parallel task or an OpenMP region.
int kernel_threads(int64_t work, int64_t min_work_per_thread);

/// True inside a task of parallel_run (on any of its threads) or inside an OpenMP parallel region.
bool in_parallel();

struct Range {
  int64_t begin, end;
};

/// Part `i` of `parts` near-equal contiguous parts of [0, n); inner boundaries are multiples of
/// `align` (the last part takes the remainder).
Range split_range(int64_t n, int parts, int i, int64_t align = 1);

namespace detail {
using TaskFn = void (*)(void* ctx, int part, int parts);
/// Runs fn(ctx, part, parts) for part 0..parts-1 on the pool (part 0 on the calling thread) and
/// returns when all are done; rethrows the first exception a part threw. Runs every part on the
/// calling thread when it is already inside a task or when another thread holds the pool.
/// skip_late: parts 1.. may be skipped when no worker has started them by the time part 0 returns
/// (part 0 must then have done the whole task, as parallel_for_dynamic's parts do); run on the
/// calling thread, only part 0 runs.
void run_parallel(int parts, TaskFn fn, void* ctx, bool skip_late = false);

template <class F>
void run_on_pool(int nt, F& fn, bool skip_late) {
  auto trampoline = [](void* ctx, int part, int parts) { (*static_cast<F*>(ctx))(part, parts); };
  run_parallel(nt, trampoline, static_cast<void*>(&fn), skip_late);
}
}  // namespace detail

/// Calls fn(part, parts) once for each part in [0, nt) on nt threads of the pool (directly, as
/// fn(0, 1), when nt <= 1). Exceptions propagate to the caller after every part has finished.
template <class F>
void parallel_run(int nt, F&& fn) {
  if (nt <= 1) {
    fn(0, 1);
    return;
  }
  detail::run_on_pool(nt, fn, /*skip_late=*/false);
}

/// Calls fn(begin, end) on `nt` threads for the parts of [0, n) (directly when nt <= 1).
template <class F>
void parallel_for_ranges(int nt, int64_t n, int64_t align, F&& fn) {
  if (nt <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  parallel_run(nt, [&](int part, int parts) {
    const Range r = split_range(n, parts, part, align);
    if (r.begin < r.end) fn(r.begin, r.end);
  });
}

/// Calls fn(i) for every i in [0, n) on `nt` threads, each taking the next index when it is free
/// (OpenMP's schedule(dynamic, 1)): for items of very different cost. A worker that has not started
/// when the calling thread runs out of items is not waited for (it would find none left).
template <class F>
void parallel_for_dynamic(int nt, int64_t n, F&& fn) {
  if (nt <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto part = [&](int, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i);
  };
  detail::run_on_pool(static_cast<int>(std::min<int64_t>(nt, n)), part, /*skip_late=*/true);
}

/// Calls fn(begin, end) on `nt` threads for `chunks` near-equal parts of [0, n) (inner boundaries
/// multiples of `align`), each thread taking the next part when it is free: a thread that starts
/// late or runs slower (a shared core) takes fewer parts instead of holding the others at the join.
/// With no more parts than threads it is parallel_for_ranges (one range per thread).
template <class F>
void parallel_for_chunks(int nt, int64_t n, int64_t align, int chunks, F&& fn) {
  chunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, (n + align - 1) / std::max<int64_t>(1, align))));
  if (nt <= 1 || chunks <= nt) {
    parallel_for_ranges(nt, n, align, fn);
    return;
  }
  parallel_for_dynamic(nt, chunks, [&](int64_t c) {
    const Range r = split_range(n, chunks, static_cast<int>(c), align);
    if (r.begin < r.end) fn(r.begin, r.end);
  });
}

/// Parts for a GEMV or GEMM of `m` activation rows on `nt` threads: decode (m <= 8, where one W
/// row serves every x row and the split is over W's rows) takes 4 per thread as threads come
/// free (parallel_for_chunks); a GEMM keeps one range each.
inline int linear_parts(int nt, int64_t m) { return m <= 8 ? 4 * nt : nt; }

/// A per-thread scratch buffer of at least `count` floats, 64-byte aligned. `slot` (0..7) names
/// independent buffers. Reallocated only when a thread asks for more than it ever did (contents
/// are then lost); never freed before the thread exits (the pool's threads live for the process).
/// Kernels use it for packing, so that the hot path does not allocate.
float* thread_scratch(int slot, size_t count);

}  // namespace fuselm::kernels
