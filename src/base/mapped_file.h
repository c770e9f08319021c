#pragma once
// A whole file mapped read-only. The one owner of mmap in fuselm: the GGUF and safetensors readers
// keep one as a member, so tensors can be zero-copy views that live as long as their file object.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>

namespace fuselm::base {

/// Why a file could not be mapped, without the path (callers prefix the file in their own error
/// type): "cannot open: <errno text>", "not a regular file", "cannot stat: ...", "cannot mmap N
/// bytes: ...".
class MapError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `path` mapped with mmap (PROT_READ, MAP_PRIVATE) for the object's lifetime. An empty file maps
/// to data() == nullptr and size() == 0 (mmap refuses length 0; callers reject short files by
/// size). Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps all of `path`; throws MapError when it cannot be opened, is not a regular file, or mmap
  /// fails.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  /// Size of the file in bytes.
  uint64_t size() const { return size_; }
  /// madvise(MADV_WILLNEED) over the whole mapping: a read-ahead hint; failure is harmless.
  void will_need() const;

 private:
  void unmap() noexcept;

  void* map_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace fuselm::base
