#include "base/large_alloc.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fuselm {
namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kLine = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

bool huge_pages_advised() {
  static const bool on = [] {
    const char* env = std::getenv("FUSELM_HUGE_PAGES");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}

void* allocate_large(size_t bytes) {
#if defined(__linux__)
  if (bytes >= kHuge) {
    const size_t size = round_up(bytes, kHuge);
    void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = round_up(begin, kHuge);
    if (aligned > begin) ::munmap(raw, aligned - begin);  // the unaligned head
    const uintptr_t tail = aligned + size, end = begin + size + kHuge;
    if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
    void* p = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
    if (huge_pages_advised()) ::madvise(p, size, MADV_HUGEPAGE);  // advice only: failure is not an error
#endif
    return p;
  }
#endif
  return ::operator new(round_up(bytes == 0 ? 1 : bytes, kLine), std::align_val_t{kLine});
}

void free_large(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
#if defined(__linux__)
  if (bytes >= kHuge) {
    ::munmap(p, round_up(bytes, kHuge));
    return;
  }
#endif
  ::operator delete(p, std::align_val_t{kLine});
}

}  // namespace fuselm
