#pragma once
// One .safetensors file, memory-mapped read-only, its header parsed and checked.
//
// Format: 8 bytes little-endian header length N, N bytes of JSON
// {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data; offsets are relative to the first byte after the header.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weights/file_dtype.h"

#include "base/mapped_file.h"

namespace fuselm::weights {

/// One tensor of a safetensors file: dtype, shape and its bytes inside the mapping.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  /// The tensor's bytes, inside the file's mapping (valid while the SafetensorsFile lives). The
  /// pointer has whatever alignment the file gives it: safetensors does not promise any.
  std::span<const std::byte> bytes;

  int64_t numel() const;
};

/// "[2, 3]": how errors print a shape.
std::string format_shape(std::span<const int64_t> shape);

struct OpenOptions {
  /// madvise(MADV_WILLNEED) the data region after mapping, so the kernel reads ahead.
  bool willneed = false;
};

/// A safetensors file mapped with mmap (PROT_READ, MAP_PRIVATE); the mapping lives as long as the
/// object. Every tensor is a zero-copy view into it. Move-only.
class SafetensorsFile {
 public:
  /// Largest header the reference implementation accepts (safetensors' MAX_HEADER_SIZE).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  /// Maps and validates `path`. Throws WeightsError, one line naming the file (and the tensor where
  /// there is one): unreadable file, file shorter than 8 bytes, header length beyond the file or
  /// the limit, header that is not JSON or not an object of tensors, a duplicate tensor name, an
  /// unknown dtype, a shape that is not a list of non-negative integers, data_offsets that are not
  /// [begin <= end], a byte count that does not match shape x dtype size, or a tensor that ends past
  /// the end of the file (truncated). Tensors may overlap; none may leave the file.
  static SafetensorsFile open(const std::filesystem::path& path, const OpenOptions& options = {});

  SafetensorsFile(SafetensorsFile&& other) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// Size of the file in bytes.
  uint64_t file_size() const { return size_; }
  /// Offset of the first data byte (8 + header length).
  uint64_t data_offset() const { return data_offset_; }

  /// All tensors, by name.
  const std::map<std::string, TensorInfo, std::less<>>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// The tensor called `name`; throws WeightsError naming the file and the tensor if absent.
  const TensorInfo& at(std::string_view name) const;
  /// The header's "__metadata__" object (null when absent).
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  base::MappedFile map_;
  uint64_t size_ = 0;  // map_.size()
  uint64_t data_offset_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  nlohmann::json metadata_;
};

}  // namespace fuselm::weights
