// The persistent thread pool behind parallel_run / parallel_for_ranges (threading.h).
//
// One task at a time: the caller publishes (fn, ctx, parts), bumps the ticket of each worker it
// needs (workers 1..parts-1; part 0 runs on the caller) and waits until a shared counter of parts
// still running reaches zero. A worker waits for its own ticket, so workers a task does not need
// stay asleep, and the task's fields cannot change while any of its parts runs. Waiting spins for
// a short while (kernels of one decode step follow each other within microseconds), then sleeps
// in std::atomic::wait (a futex); notify_one costs no system call while nobody sleeps.
// FUSELM_SPIN_US sets the spin (default 50 microseconds; 0: sleep at once).
//
// A worker claims its part before it runs it (a compare-and-swap of its `claimed` generation from
// the ticket before to the ticket it woke on). A task whose parts may be skipped once the caller's
// part is done (parallel_for_dynamic: the caller's part returns only when every item is taken)
// claims, after its own part, every part no worker has started and counts it as done: a worker
// that was descheduled, or asleep, does not hold up the join (2 threads on a shared 2-core slice,
// SmolLM2 Q4_0 decode: 35 tok/s with the caller waiting for such workers, 100 with one thread).
// A worker that wakes for a part already claimed goes back to waiting; it touches no task field.
#include <immintrin.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

thread_local bool t_in_task = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

int64_t spin_ns() {
  static const int64_t ns = [] {
    const char* s = std::getenv("FUSELM_SPIN_US");
    const long us = s && *s ? std::strtol(s, nullptr, 10) : 50;
    return static_cast<int64_t>(std::max(0L, us)) * 1000;
  }();
  return ns;
}

// Waits until `a` no longer holds `old`; returns the new value.
template <class T>
T wait_while_equal(const std::atomic<T>& a, T old) {
  T v = a.load(std::memory_order_acquire);
  if (v != old) return v;
  const int64_t limit = spin_ns();
  if (limit > 0) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1;; ++i) {
      cpu_relax();
      v = a.load(std::memory_order_acquire);
      if (v != old) return v;
      if ((i & 63) == 0 &&
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count() > limit)
        break;
    }
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

// Every part on the calling thread, in order (nested calls, or the pool busy with another task).
void run_here(int parts, detail::TaskFn fn, void* ctx) {
  const bool was = t_in_task;
  t_in_task = true;
  std::exception_ptr error;
  for (int p = 0; p < parts; ++p) {
    try {
      fn(ctx, p, parts);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  t_in_task = was;
  if (error) std::rethrow_exception(error);
}

struct alignas(64) Ticket {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> claimed{0};  // the last ticket value whose part was claimed

  // Claims the part of ticket value t (the caller posts t only once t - 1's part was claimed).
  bool claim(uint32_t t) {
    uint32_t expected = t - 1;
    return claimed.compare_exchange_strong(expected, t, std::memory_order_acq_rel, std::memory_order_relaxed);
  }
};

class Pool {
 public:
  ~Pool() {
    // Joined only at exit, with no task running.
    stop_.store(true, std::memory_order_release);
    for (auto& t : tickets_) {
      t->value.fetch_add(1, std::memory_order_release);
      t->value.notify_one();
    }
    for (auto& w : workers_) w.join();
  }

  void run(int parts, detail::TaskFn fn, void* ctx, bool skip_late) {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {  // another thread's task holds the pool: run this one here
      run_here(skip_late ? 1 : parts, fn, ctx);
      return;
    }
    grow(parts - 1);
    fn_ = fn;
    ctx_ = ctx;
    parts_ = parts;
    error_ = nullptr;
    pending_.store(parts - 1, std::memory_order_relaxed);
    for (int w = 0; w < parts - 1; ++w) {
      tickets_[w]->value.fetch_add(1, std::memory_order_release);
      tickets_[w]->value.notify_one();
    }
    run_part(0);
    if (skip_late) {
      for (int w = 0; w < parts - 1; ++w)
        if (tickets_[w]->claim(tickets_[w]->value.load(std::memory_order_relaxed)))
          pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    for (int left = pending_.load(std::memory_order_acquire); left != 0;)
      left = wait_while_equal(pending_, left);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_part(int part) {
    const bool was = t_in_task;
    t_in_task = true;
    try {
      fn_(ctx_, part, parts_);
    } catch (...) {
      std::lock_guard g(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_task = was;
  }

  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers) {
      const int index = static_cast<int>(workers_.size());
      tickets_.push_back(std::make_unique<Ticket>());
      workers_.emplace_back([this, index, t = tickets_.back().get()] { work(index + 1, *t); });
    }
  }

  void work(int part, Ticket& ticket) {
    t_in_task = true;  // a worker only ever runs parts of tasks: kernels inside stay serial
    uint32_t seen = 0;  // tickets start at 0: the first task may be posted before this thread runs
    for (;;) {
      seen = wait_while_equal(ticket.value, seen);
      if (stop_.load(std::memory_order_acquire)) return;
      if (!ticket.claim(seen)) continue;  // the caller skipped this part
      run_part(part);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  std::mutex mu_;  // held by the thread whose task runs
  std::vector<std::unique_ptr<Ticket>> tickets_;
  std::vector<std::thread> workers_;
  detail::TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int parts_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

bool in_parallel() { return t_in_task || omp_in_parallel(); }

namespace detail {

void run_parallel(int parts, TaskFn fn, void* ctx, bool skip_late) {
  if (parts <= 1 || t_in_task) {  // nested: the parts run here, one after another
    run_here(skip_late ? 1 : std::max(1, parts), fn, ctx);
    return;
  }
  pool().run(parts, fn, ctx, skip_late);
}

}  // namespace detail
}  // namespace fuselm::kernels
