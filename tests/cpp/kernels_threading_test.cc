// The kernels' thread pool (kernels/cpu/threading.h): every part runs exactly once for 1..N
// threads, ranges cover [0, n) exactly, nested calls run inline on the calling thread, exceptions
// reach the caller after every part finished, a thread's scratch survives between tasks, and a
// dynamic loop does not wait for a worker that never started.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/threading.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_threading_test {

TEST(KernelsThreading, EveryPartRunsOnceForEachCount) {
  for (int nt = 1; nt <= 8; ++nt) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(nt));
    std::mutex mu;
    std::set<std::thread::id> ids;
    std::atomic<int> seen_parts{0};
    for (int rep = 0; rep < 50; ++rep) {
      parallel_run(nt, [&](int part, int parts) {
        EXPECT_TRUE(nt == 1 || in_parallel());
        seen_parts.store(parts);
        runs[static_cast<size_t>(part)].fetch_add(1);
        std::lock_guard g(mu);
        ids.insert(std::this_thread::get_id());
      });
    }
    EXPECT_EQ(seen_parts.load(), nt);
    for (int p = 0; p < nt; ++p) EXPECT_EQ(runs[static_cast<size_t>(p)].load(), 50) << "nt " << nt << " part " << p;
    EXPECT_EQ(static_cast<int>(ids.size()), nt) << "each part on its own thread";
    EXPECT_FALSE(in_parallel());
  }
}

TEST(KernelsThreading, RangesCoverEveryIndexOnce) {
  for (int nt = 1; nt <= 5; ++nt)
    for (int64_t n : {0, 1, 7, 64, 1000, 1027}) {
      std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
      parallel_for_ranges(nt, n, 16, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        EXPECT_TRUE(b % 16 == 0);
        for (int64_t i = b; i < e; ++i) hit[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hit[static_cast<size_t>(i)].load(), 1) << nt << " " << n << " " << i;
      std::vector<std::atomic<int>> dyn(static_cast<size_t>(n));
      parallel_for_dynamic(nt, n, [&](int64_t i) { dyn[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dyn[static_cast<size_t>(i)].load(), 1) << nt << " " << n << " " << i;
    }
}

TEST(KernelsThreading, ChunksCoverEveryIndexOnceOnAlignedBoundaries) {
  for (int nt = 1; nt <= 4; ++nt)
    for (int64_t n : {0, 1, 15, 16, 17, 100, 1027})
      for (int chunks : {1, 3, 8, 64}) {
        std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
        parallel_for_chunks(nt, n, 16, chunks, [&](int64_t b, int64_t e) {
          EXPECT_LT(b, e);
          EXPECT_EQ(b % 16, 0);
          for (int64_t i = b; i < e; ++i) hit[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hit[static_cast<size_t>(i)].load(), 1) << nt << " " << n << " " << chunks << " " << i;
      }
}

// The point of chunks: a thread held up in one part leaves the rest to the others.
TEST(KernelsThreading, ChunksGoToTheThreadThatIsFree) {
  std::mutex mu;
  std::map<std::thread::id, int> taken;
  std::atomic<bool> first{true};
  std::thread::id slow;
  parallel_for_chunks(2, 16 * 16, 16, 16, [&](int64_t, int64_t) {
    if (first.exchange(false)) {
      {
        std::lock_guard g(mu);
        slow = std::this_thread::get_id();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    std::lock_guard g(mu);
    ++taken[std::this_thread::get_id()];
  });
  int total = 0;
  for (const auto& [id, n] : taken) total += n;
  EXPECT_EQ(total, 16);
  EXPECT_LT(taken[slow], 8) << "the thread that slept in its first part still took half the parts";
}

// parallel_for_dynamic does not wait for a worker that has not started when the caller has taken
// every item: asleep after a pause (longer than the spin), the worker usually wakes after the
// caller is done, finds its part claimed and must leave the finished task alone, and still take
// the next task's part (parallel_run waits for each part on its own thread).
TEST(KernelsThreading, DynamicSkipsALateWorkerAndThePoolGoesOn) {
  constexpr int reps = 40;
  std::atomic<int> calls{0};
  for (int rep = 0; rep < reps; ++rep) {
    std::this_thread::sleep_for(std::chrono::microseconds(rep % 2 ? 2000 : 0));
    std::vector<std::atomic<int>> hit(3);
    parallel_for_dynamic(2, 3, [&](int64_t i) {
      hit[static_cast<size_t>(i)].fetch_add(1);
      calls.fetch_add(1);
    });
    for (const auto& h : hit) ASSERT_EQ(h.load(), 1) << "rep " << rep;
    const int after = calls.load();
    std::mutex mu;
    std::set<std::thread::id> ids;
    parallel_run(2, [&](int, int) {
      std::lock_guard g(mu);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ids.size(), size_t{2}) << "rep " << rep;
    EXPECT_EQ(calls.load(), after) << "a late worker ran a finished task, rep " << rep;
  }
  EXPECT_EQ(calls.load(), 3 * reps);
}

TEST(KernelsThreading, NestedCallsRunInlineOnTheCallingThread) {
  testing::ScopedThreads threads(4);
  std::atomic<int> inner_parts{0}, wrong_thread{0}, inner_threads{0};
  parallel_run(3, [&](int, int) {
    const auto me = std::this_thread::get_id();
    inner_threads.fetch_add(kernel_threads(1 << 30, 1));  // inside a task: 1
    parallel_run(4, [&](int, int parts) {
      if (std::this_thread::get_id() != me) wrong_thread.fetch_add(1);
      EXPECT_EQ(parts, 4);
      inner_parts.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_parts.load(), 12);
  EXPECT_EQ(wrong_thread.load(), 0);
  EXPECT_EQ(inner_threads.load(), 3);
  EXPECT_EQ(kernel_threads(1 << 30, 1), 4);
}

TEST(KernelsThreading, ExceptionsPropagateAfterEveryPartFinished) {
  for (int nt : {2, 3}) {
    std::atomic<int> finished{0};
    EXPECT_THROW(parallel_run(nt,
                              [&](int part, int) {
                                if (part == nt - 1) throw std::runtime_error("worker part");
                                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                finished.fetch_add(1);
                              }),
                 std::runtime_error);
    EXPECT_EQ(finished.load(), nt - 1);
    EXPECT_THROW(parallel_for_ranges(nt, 10, 1, [&](int64_t b, int64_t) {
      if (b == 0) throw std::invalid_argument("caller part");
    }), std::invalid_argument);
    // the pool still works afterwards
    std::atomic<int> ok{0};
    parallel_run(nt, [&](int, int) { ok.fetch_add(1); });
    EXPECT_EQ(ok.load(), nt);
  }
}

TEST(KernelsThreading, ConcurrentCallersBothFinish) {
  // Two threads dispatching at once: one gets the pool, the other runs its parts itself.
  std::atomic<int64_t> sum{0};
  auto caller = [&] {
    for (int rep = 0; rep < 200; ++rep)
      parallel_for_ranges(3, 300, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
      });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2 * 200 * (299 * 300 / 2));
}

TEST(KernelsThreading, ScratchIsPerThreadAndKept) {
  // Each part writes its id into its thread's scratch; the next task finds it there (same
  // threads, buffers not reallocated when no larger size is asked).
  constexpr int nt = 3;
  std::vector<float*> first(nt), second(nt);
  parallel_run(nt, [&](int part, int) {
    float* s = thread_scratch(5, 256);
    s[0] = static_cast<float>(part);
    first[static_cast<size_t>(part)] = s;
  });
  std::atomic<int> kept{0};
  parallel_run(nt, [&](int part, int) {
    float* s = thread_scratch(5, 128);
    second[static_cast<size_t>(part)] = s;
    if (s[0] == static_cast<float>(part)) kept.fetch_add(1);
  });
  EXPECT_EQ(kept.load(), nt);
  EXPECT_EQ(first, second);
  EXPECT_EQ(std::set<float*>(first.begin(), first.end()).size(), size_t{nt});
}

}  // namespace kernels_threading_test
}  // namespace fuselm::kernels
