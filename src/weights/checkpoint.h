#pragma once
// A model directory's safetensors shards, mapped once, looked up by checkpoint key.
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weights/file_dtype.h"
#include "weights/safetensors.h"

namespace fuselm::weights {

/// A zero-copy view of one checkpoint tensor. Valid while the Checkpoint it came from (or a copy of
/// it) lives: data and shape point into the file's mapping and header.
struct TensorView {
  std::string_view key;  // points into the file's header (lives as long as `file`)
  DType dtype = DType::f32;
  std::span<const int64_t> shape;
  const void* data = nullptr;  // alignment is whatever the file gives (see TensorInfo::bytes)
  size_t nbytes = 0;
  const SafetensorsFile* file = nullptr;  // file->path() names the shard
};

/// The shards of a checkpoint. Each file is mapped once and shared (copies of a Checkpoint share
/// the mappings, which live until the last copy, or the last LoadedParameters that uses them, dies).
class Checkpoint {
 public:
  /// The index file that lists the shards of a sharded checkpoint.
  static constexpr const char* kIndexName = "model.safetensors.index.json";

  /// Opens `path`:
  /// - a directory with model.safetensors.index.json: the shards its "weight_map" names, each key
  ///   found in the shard the index gives (a key the index gives but the shard lacks is an error);
  /// - another directory: every *.safetensors in it (a key in two files is an error);
  /// - a .safetensors file: that file alone.
  /// Throws WeightsError, one line naming the file: a malformed index, a shard the index names that
  /// does not exist (naming the shard and one of its keys), no safetensors at all, or any error of
  /// SafetensorsFile::open.
  static Checkpoint open(const std::filesystem::path& path, const OpenOptions& options = {});

  /// The directory (or the single file) this checkpoint was opened from.
  const std::filesystem::path& path() const { return path_; }
  /// The mapped shards, in name order.
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  /// Number of tensors reachable by key.
  size_t size() const { return tensors_.size(); }
  /// Every key, sorted.
  std::vector<std::string> keys() const;

  /// The tensor stored under `key`, or nullopt.
  std::optional<TensorView> find(std::string_view key) const;
  /// The tensor stored under `key`; throws WeightsError naming the key and the directory.
  TensorView at(std::string_view key) const;

 private:
  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* tensor;
  };

  std::filesystem::path path_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

}  // namespace fuselm::weights
