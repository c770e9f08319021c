#pragma once
// An owned, 64-byte aligned byte buffer (converted or realigned weights), on huge pages from 2 MiB
// up (base/large_alloc.h).
#include <cstddef>
#include <utility>

#include "base/large_alloc.h"

namespace fuselm::weights {

/// Heap bytes aligned to kAlignment (a cache line; also an AVX-512 vector). Move-only; the address
/// of the bytes never changes, so views into them survive moving the buffer.
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  /// Uninitialized storage for `bytes` bytes (at least one cache line is allocated).
  explicit AlignedBuffer(size_t bytes)
      : data_(allocate_large(bytes)), size_(bytes) {}
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { release(); }

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() noexcept {
    free_large(data_, size_);
    data_ = nullptr;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fuselm::weights
