#include "server/embedding_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

namespace fuselm::server {
namespace {

nlohmann::json read_json(const std::filesystem::path& dir, const std::string& rel) {
  std::ifstream f(dir / rel);
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{} in the model directory is not valid JSON: {}", rel, e.what()));
  }
}

// The folder of modules.json's Pooling module ("1_Pooling"), empty when there is none.
std::string pooling_folder(const nlohmann::json& modules) {
  if (!modules.is_array()) return {};
  for (const auto& m : modules)
    if (m.is_object() && m.value("type", "").find("Pooling") != std::string::npos) return m.value("path", "");
  return {};
}

// sentence-transformers' Pooling config: one pooling_mode_* flag set (or "pooling_mode").
engine::Pooling pooling_of(const nlohmann::json& cfg, const std::string& rel) {
  if (auto it = cfg.find("pooling_mode"); it != cfg.end() && it->is_string()) {
    if (auto p = engine::parse_pooling(it->get<std::string>())) return *p;
    throw std::runtime_error(fmt::format("{}: pooling_mode '{}' is not one fuselm has (mean, lasttoken, cls)", rel, it->get<std::string>()));
  }
  auto on = [&](const char* k) { return cfg.value(k, false); };
  if (on("pooling_mode_max_tokens") || on("pooling_mode_weightedmean_tokens") || on("pooling_mode_mean_sqrt_len_tokens"))
    throw std::runtime_error(fmt::format("{}: its pooling mode is not one fuselm has (mean, lasttoken, cls); pass --pooling", rel));
  if (on("pooling_mode_lasttoken")) return engine::Pooling::last;
  if (on("pooling_mode_cls_token")) return engine::Pooling::cls;
  if (on("pooling_mode_mean_tokens")) return engine::Pooling::mean;
  throw std::runtime_error(fmt::format("{} sets no pooling mode; pass --pooling", rel));
}

}  // namespace

EmbeddingConfig embedding_config(const std::filesystem::path& model_dir, std::optional<engine::Pooling> flag) {
  EmbeddingConfig c;
  if (flag) {
    c.pooling = *flag;
    c.source = "--pooling";
    return c;
  }
  if (!std::filesystem::exists(model_dir / "modules.json")) return c;
  const auto modules = read_json(model_dir, "modules.json");
  const std::string folder = pooling_folder(modules);
  if (folder.empty()) return c;
  const std::string rel = folder + "/config.json";
  if (!std::filesystem::exists(model_dir / rel)) return c;
  c.pooling = pooling_of(read_json(model_dir, rel), rel);
  c.source = rel;
  return c;
}

}  // namespace fuselm::server
