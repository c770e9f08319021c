#pragma once
// One GGUF file (llama.cpp's model format, versions 2 and 3), memory-mapped read-only, its header,
// metadata and tensor infos parsed and checked against the file before anything is read.
//
// Layout (little-endian; ggml/docs/gguf.md, ggml/src/gguf.cpp):
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count
//   metadata_kv_count × { string key, u32 value_type, value }
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to `general.alignment` (default 32), then the data; offsets are relative to it.
//   string = u64 length + bytes (no terminator); array = u32 element type, u64 count, elements.
// ne[0] is the innermost (contiguous) dimension: a torch [rows, cols] weight has ne = {cols, rows}.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"

namespace fuselm::weights {

/// Metadata value types (gguf's GGUFValueType / ggml's gguf_type).
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};

/// "u32", "string", ...: how errors name a value type.
const char* gguf_type_name(GgufType t);

/// One metadata value. Scalars fill the field of their kind (unsigned types: u, signed: i, f32 and
/// f64: f, bool: b, string: s); an array fills `elems` (elements of type `elem_type`, each a
/// scalar or, for nested arrays, an array).
struct GgufValue {
  GgufType type = GgufType::u8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufType elem_type = GgufType::u8;
  std::vector<GgufValue> elems;

  bool is_integer() const;  // any of the eight integer types
  bool is_float() const { return type == GgufType::f32 || type == GgufType::f64; }
};

/// ggml tensor types with their block geometry (ggml.c's type_traits; gguf's GGML_QUANT_SIZES).
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;     // "F32", "Q4_K", ...
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

/// The ggml type with this id, or nullptr for an id this table does not know.
const GgmlTypeInfo* ggml_type_info(uint32_t id);

/// One tensor of a GGUF file.
struct GgufTensor {
  std::string name;
  const GgmlTypeInfo* type = nullptr;  // never null once parsed
  /// ggml order: ne[0] innermost. shape() is the torch order (reversed).
  std::vector<int64_t> ne;
  /// Offset of the first byte in the file (data offset + the tensor's relative offset).
  uint64_t file_offset = 0;
  /// The tensor's bytes inside the mapping (valid while the GgufFile lives), aligned to the
  /// file's alignment relative to the mapping's (page-aligned) start.
  std::span<const std::byte> bytes;

  std::vector<int64_t> shape() const;
  int64_t numel() const;
};

/// A GGUF file mapped with mmap (PROT_READ, MAP_PRIVATE); the mapping lives as long as the object
/// and every tensor is a zero-copy view into it. Move-only.
class GgufFile {
 public:
  /// Most dimensions a ggml tensor has (GGML_MAX_DIMS).
  static constexpr uint32_t kMaxDims = 4;

  /// Maps and validates `path`. Throws WeightsError, one line naming the file and the key or tensor
  /// concerned: unreadable file; bad magic; a version other than 2 or 3 (or a big-endian file);
  /// counts, string lengths or array lengths that run past the end of the file; an unknown or
  /// mismatched value type; a duplicate key or tensor name; a `general.alignment` that is not a
  /// power-of-two u32; more than 4 or negative or overflowing dimensions; an unknown ggml type; a
  /// row (ne[0]) that is not a whole number of blocks; a misaligned offset; a tensor that ends past
  /// the end of the file; tensors whose bytes overlap.
  static GgufFile open(const std::filesystem::path& path);

  GgufFile(GgufFile&& other) noexcept = default;
  GgufFile& operator=(GgufFile&& other) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  /// Offset of the data section (first byte after the aligned tensor infos).
  uint64_t data_offset() const { return data_offset_; }
  /// `general.alignment`, or 32.
  uint64_t alignment() const { return alignment_; }

  /// Metadata keys in file order, and values by key.
  const std::vector<std::string>& keys() const { return keys_; }
  const GgufValue* find_value(std::string_view key) const;
  /// The value of `key`; throws WeightsError naming the file and key when absent.
  const GgufValue& value(std::string_view key) const;
  /// Typed reads of scalar metadata; throw WeightsError naming the key when absent, of another
  /// kind, or (integers) out of range for the result.
  std::string get_string(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // f32, f64 or any integer
  bool get_bool(std::string_view key) const;

  /// Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const GgufTensor* find(std::string_view name) const;
  /// The tensor called `name`; throws WeightsError naming the file and the tensor if absent.
  const GgufTensor& at(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::filesystem::path path_;
  base::MappedFile map_;
  uint64_t size_ = 0;  // map_.size()
  uint32_t version_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> values_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace fuselm::weights
