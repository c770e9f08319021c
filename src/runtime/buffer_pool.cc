#include "runtime/buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace fuselm::runtime {

BufferPool::~BufferPool() {
  for (auto& b : all_) std::free(b->data);
}

Buffer* BufferPool::acquire(size_t bytes) {
  bytes = (bytes + 63) & ~size_t{63};
  if (bytes == 0) bytes = 64;
  // Best fit, but never waste more than half of a recycled buffer.
  auto it = std::lower_bound(free_.begin(), free_.end(), bytes, [](const Buffer* b, size_t n) { return b->bytes < n; });
  if (it != free_.end() && (*it)->bytes <= 2 * bytes) {
    Buffer* b = *it;
    free_.erase(it);
    return b;
  }
  auto b = std::make_unique<Buffer>();
  b->data = std::aligned_alloc(64, bytes);
  if (!b->data) throw std::bad_alloc();
  b->bytes = bytes;
  ++allocations_;
  all_.push_back(std::move(b));
  free_.reserve(all_.size());  // room for every buffer: release() never reallocates
  return all_.back().get();
}

void BufferPool::release(Buffer* b) {
  b->refs = 0;
  // After the equal sizes already there, as the multimap did (most recently freed is taken last).
  auto it = std::upper_bound(free_.begin(), free_.end(), b->bytes, [](size_t n, const Buffer* x) { return n < x->bytes; });
  free_.insert(it, b);
}

}  // namespace fuselm::runtime
