#include "runtime/buffer_pool.h"

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
  auto it = free_.lower_bound(bytes);
  if (it != free_.end() && it->first <= 2 * bytes) {
    Buffer* b = it->second;
    free_.erase(it);
    return b;
  }
  auto b = std::make_unique<Buffer>();
  b->data = std::aligned_alloc(64, bytes);
  if (!b->data) throw std::bad_alloc();
  b->bytes = bytes;
  ++allocations_;
  all_.push_back(std::move(b));
  return all_.back().get();
}

void BufferPool::release(Buffer* b) {
  b->refs = 0;
  free_.emplace(b->bytes, b);
}

}  // namespace fuselm::runtime
