#pragma once
// The speculative-decoding flags of `generate`, `bench` and `serve`, with vLLM's names
// (engine/speculative.h), and the draft model they load.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "cli/model_args.h"
#include "engine/backend.h"
#include "engine/speculative.h"

namespace fuselm::cli {

struct SpeculativeArgs {
  std::string method;             // --speculative-method ngram|draft; empty: off
  int32_t num_tokens = 5;         // --num-speculative-tokens
  std::string model;              // --speculative-model DIR_OR_GGUF
  std::string dtype = "auto";     // --speculative-dtype: the draft model's weight storage
  int32_t ngram_max = 4, ngram_min = 2;
  int32_t disable_by_batch_size = 4;
  bool enabled() const { return !method.empty(); }
};

void add_speculative_options(CLI::App& cmd, SpeculativeArgs& a);

/// The draft model (method draft) and the engine's options; empty options when speculation is
/// off. The draft model must stay alive while an engine uses the options.
struct Speculation {
  std::optional<LoadedModel> draft;
  std::unique_ptr<engine::ModelBackend> draft_backend;
  engine::SpeculativeOptions options;
};

/// Checks the flags against `target` (loaded with `target_args`) and loads the draft model with
/// the target's KV sizing. Throws std::runtime_error, one line: a model whose graph keeps a
/// recurrent state (no roll-back of rejected drafts), tensor parallelism, a draft model flag
/// without the draft method (or the reverse), a draft vocabulary differing from the target's
/// (naming both sizes).
Speculation setup_speculation(const SpeculativeArgs& a, engine::Model& target, const ModelArgs& target_args);

/// "ngram K=5 (n-gram 4..2)" / "draft K=5 (DIR, q4_0)": for stats lines.
std::string describe(const SpeculativeArgs& a);

}  // namespace fuselm::cli
