#include "kernels/cpu/threading.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace fuselm::kernels {

int kernel_threads(int64_t work, int64_t min_work_per_thread) {
  if (in_parallel()) return 1;
  const int64_t max_threads = std::max(1, omp_get_max_threads());
  const int64_t by_work = std::max<int64_t>(1, work / std::max<int64_t>(1, min_work_per_thread));
  return static_cast<int>(std::min(max_threads, by_work));
}

Range split_range(int64_t n, int parts, int i, int64_t align) {
  if (parts <= 1) return {0, n};
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  const int64_t base = units / parts, extra = units % parts;
  const int64_t u0 = i * base + std::min<int64_t>(i, extra);
  const int64_t u1 = u0 + base + (i < extra ? 1 : 0);
  return {std::min(n, u0 * align), std::min(n, u1 * align)};
}

namespace {

struct Scratch {
  float* data = nullptr;
  size_t capacity = 0;
  ~Scratch() { std::free(data); }
};

}  // namespace

float* thread_scratch(int slot, size_t count) {
  static thread_local Scratch buffers[8];
  Scratch& s = buffers[slot & 7];
  if (count > s.capacity) {
    size_t cap = std::max(count, s.capacity + s.capacity / 2);
    cap = (cap + 15) & ~size_t{15};  // whole cache lines
    std::free(s.data);
    s.data = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
    if (!s.data) {
      s.capacity = 0;
      throw std::bad_alloc();
    }
    s.capacity = cap;
  }
  return s.data;
}

}  // namespace fuselm::kernels
