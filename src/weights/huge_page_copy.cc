#include "weights/huge_page_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "base/large_alloc.h"

namespace fuselm::weights {

const void* huge_page_copy(const void* mapped, size_t bytes, std::vector<AlignedBuffer>& buffers, bool& owned) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes < kHuge || !huge_pages_advised()) return mapped;
  AlignedBuffer& b = buffers.emplace_back(bytes);
  std::memcpy(b.data(), mapped, bytes);
  owned = true;
#if defined(__linux__) && defined(MADV_DONTNEED)
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(mapped) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(mapped) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
#endif
  return b.data();
}

}  // namespace fuselm::weights
