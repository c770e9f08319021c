// allocate_large: alignment by size, every byte writable, and the advice it gives the OS.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "base/large_alloc.h"

namespace fuselm {
namespace base_large_alloc_test {

TEST(BaseLargeAlloc, AlignsByItsSizeAndEveryByteIsUsable) {
  constexpr size_t kHuge = size_t{2} << 20;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, kHuge - 1, kHuge, 5 * kHuge + 3}) {
    auto* p = static_cast<unsigned char*>(allocate_large(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(a % 64, 0u) << bytes;
    if (bytes >= kHuge) EXPECT_EQ(a % kHuge, 0u) << bytes;
    std::memset(p, 0xab, bytes);
    if (bytes) EXPECT_EQ(p[bytes - 1], 0xab);
    free_large(p, bytes);
  }
  free_large(nullptr, kHuge);  // a no-op, as free(nullptr)
}

// With huge pages advised, a large buffer's mapping carries the hugepage flag ("hg" in VmFlags).
TEST(BaseLargeAlloc, LargeBuffersAreAdvisedAsHugePages) {
  if (!huge_pages_advised()) GTEST_SKIP() << "FUSELM_HUGE_PAGES=0";
  constexpr size_t kBytes = size_t{8} << 20;
  void* p = allocate_large(kBytes);
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) GTEST_SKIP() << "no /proc/self/smaps";
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  std::string line;
  bool in_mapping = false, advised = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(start, 0) == 0) in_mapping = true;
    else if (in_mapping && line.rfind("VmFlags:", 0) == 0) {
      advised = line.find(" hg") != std::string::npos;
      break;
    }
  }
  free_large(p, kBytes);
  EXPECT_TRUE(in_mapping) << "no mapping starts at " << start;
  EXPECT_TRUE(advised) << "the mapping's VmFlags lack hg";
}

}  // namespace base_large_alloc_test
}  // namespace fuselm
