#pragma once
// Records of `fuselm verify` passes, and the one-time hint that generate and serve print for a
// model never verified. A record lives in the cache (ir_cache.h), keyed by the model's content:
// $FUSELM_CACHE/verified/<model dir name>-<verify_model_key>.json.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace fuselm::cli {

/// A 16-hex-digit key of what verify compared: the canonical config.json and the name, size and
/// modification time of each weight file of model_dir (*.safetensors, the shard index, *.gguf,
/// through symbolic links: a GGUF directory's model.gguf is the file itself). Throws
/// std::runtime_error naming config.json when it is no JSON.
std::string verify_model_key(const std::filesystem::path& model_dir);

/// The record file of model_dir (need not exist).
std::filesystem::path verify_record_path(const std::filesystem::path& model_dir);

/// The running engine build: size and modification time of the fuselm executable, so a rebuilt
/// engine is told apart from the one that passed.
std::string engine_build_id();

/// Appends `pass` (the verdict's figures) to model_dir's record, with the engine build and the
/// time. Best effort: a cache that cannot be written is reported on stderr, not an error.
void record_verify_pass(const std::filesystem::path& model_dir, nlohmann::json pass);

/// generate and serve: when model_dir's record holds no pass and no earlier hint, prints one line
/// on stderr saying that `fuselm verify` compares the model with transformers, and records that it
/// did (so the line shows once per model). `model_arg` is the model as the user named it (empty:
/// the default model). Never throws.
void hint_verify_once(const std::filesystem::path& model_dir, const std::string& model_arg);

}  // namespace fuselm::cli
