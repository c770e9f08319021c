#pragma once
// Activation memory: buffers are recycled by size so that, once the first decode step has run,
// further steps of the same shape allocate nothing.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device.h"

namespace fuselm::runtime {

struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  int refs = 0;  // live values referring to this buffer (the executor counts)
};

class BufferPool {
 public:
  explicit BufferPool(Device device = Device::cpu) : device_(device) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  /// A buffer of at least `bytes` bytes, 64-byte aligned, with refs == 0.
  Buffer* acquire(size_t bytes);
  /// Returns a buffer to the free list.
  void release(Buffer* b);
  /// Number of fresh allocations made so far (tests check it stays constant during decode).
  int64_t allocations() const { return allocations_; }
  /// The device whose memory the pool hands out (the CPU: 64-byte aligned host memory).
  Device device() const { return device_; }

 private:
  std::vector<std::unique_ptr<Buffer>> all_;
  // Free buffers sorted by size. A vector, not a multimap: its capacity grows only with all_, so
  // release and acquire of recycled buffers never touch the heap.
  std::vector<Buffer*> free_;
  int64_t allocations_ = 0;
  Device device_ = Device::cpu;
};

}  // namespace fuselm::runtime
