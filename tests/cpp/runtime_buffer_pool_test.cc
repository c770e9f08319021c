// BufferPool: best-fit recycling, and no heap traffic once buffers of the needed sizes exist (so a
// decode step, which acquires and releases the same sizes as the one before, allocates nothing).
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "runtime/buffer_pool.h"

// Counts global operator new calls made by this thread while counting is on (the other tests of
// the binary are unaffected: counting is off unless a test turns it on).
namespace new_counter {
thread_local bool g_counting = false;
thread_local long g_news = 0;
}  // namespace new_counter

void* operator new(std::size_t n) {
  if (new_counter::g_counting) ++new_counter::g_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Every form that can pair with the free() below is replaced too (the nothrow new that
// std::stable_sort's temporary buffer uses), or ASan reports new/free mismatches in other tests.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (new_counter::g_counting) ++new_counter::g_news;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace fuselm::runtime {
namespace runtime_buffer_pool_test {

TEST(BufferPool, RecyclesBestFitWithinTwice) {
  BufferPool pool;
  Buffer* a = pool.acquire(1000);
  Buffer* b = pool.acquire(4000);
  EXPECT_EQ(pool.allocations(), 2);
  EXPECT_EQ(a->bytes % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 64, 0u);
  pool.release(b);
  pool.release(a);
  EXPECT_EQ(pool.acquire(900), a);    // the smallest that fits
  EXPECT_EQ(pool.acquire(2100), b);   // 4000 <= 2 * 2100
  Buffer* c = pool.acquire(100);      // nothing free: a fresh one
  EXPECT_EQ(pool.allocations(), 3);
  pool.release(a);
  EXPECT_NE(pool.acquire(300), a);    // 1024 > 2 * 320: not wasted on a small request
  EXPECT_EQ(pool.allocations(), 4);
  pool.release(c);
}

TEST(BufferPool, SteadyStateTouchesNoHeap) {
  BufferPool pool;
  const std::vector<size_t> sizes = {2304, 2304, 3840, 12288, 2304, 196608, 64, 2304, 12288, 4};
  std::vector<Buffer*> held;
  held.reserve(sizes.size());
  auto step = [&] {  // acquire all, then release in an interleaved order, like a forward pass
    for (size_t s : sizes) held.push_back(pool.acquire(s));
    for (size_t i = 0; i < held.size(); i += 2) pool.release(held[i]);
    for (size_t i = 1; i < held.size(); i += 2) pool.release(held[i]);
    held.clear();
  };
  step();
  const int64_t allocs = pool.allocations();
  ::new_counter::g_news = 0;
  ::new_counter::g_counting = true;
  for (int i = 0; i < 10; ++i) step();
  ::new_counter::g_counting = false;
  EXPECT_EQ(::new_counter::g_news, 0) << "operator new was called while recycling buffers";
  EXPECT_EQ(pool.allocations(), allocs);
}

}  // namespace runtime_buffer_pool_test
}  // namespace fuselm::runtime
