#pragma once
// Where a model's IR lives when its own directory cannot hold it (a shared read-only cache, a
// mounted volume): a cache directory keyed by the model's content.
#include <filesystem>
#include <string>

namespace fuselm::engine {

/// config.json parsed and dumped again (keys sorted, no whitespace), so a trailing newline or a
/// key order does not make it another config. Throws std::runtime_error naming the file when it is
/// not JSON.
std::string canonical_config(const std::filesystem::path& config_json);

/// A 16-hex-digit key of the model's content: the canonical config.json, and the name, size and
/// modification time of each checkpoint file (*.safetensors, the shard index). Two copies of one
/// model share a key; any rewritten shard changes it.
std::string model_content_key(const std::filesystem::path& model_dir);

/// The cache root: $FUSELM_CACHE, else $XDG_CACHE_HOME/fuselm, else $HOME/.cache/fuselm.
std::filesystem::path cache_root();

/// The IR directory for model_dir under cache_root(): "<model dir name>-<model_content_key>".
std::filesystem::path cache_ir_dir(const std::filesystem::path& model_dir);

/// Whether this process can create files in `dir`, found by creating (and removing) one: the mode
/// bits do not say (root ignores them; a read-only mount overrides them).
bool dir_is_writable(const std::filesystem::path& dir);

}  // namespace fuselm::engine
