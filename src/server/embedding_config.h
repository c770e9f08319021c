#pragma once
// How /v1/embeddings pools a model's final hidden states: from `fuselm serve --pooling`, else
// from the model directory's sentence-transformers files (modules.json names the Pooling module's
// folder, whose config.json sets pooling_mode_*), else last-token pooling. Normalised (L2) by
// default.
#include <filesystem>
#include <optional>
#include <string>

#include "engine/pooling.h"

namespace fuselm::server {

struct EmbeddingConfig {
  engine::Pooling pooling = engine::Pooling::last;
  bool normalize = true;
  std::string source = "default";  // where the pooling came from: "--pooling", "1_Pooling/config.json", "default"
};

/// The pooling for `model_dir`: `flag` when given, else the sentence-transformers config, else
/// last. Throws std::runtime_error naming the file (relative to the model directory) when its
/// JSON is malformed or names a pooling mode fuselm does not have (max, weightedmean).
EmbeddingConfig embedding_config(const std::filesystem::path& model_dir, std::optional<engine::Pooling> flag);

}  // namespace fuselm::server
