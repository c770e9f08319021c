#pragma once
// Options of the serving engine, shared by `fuselm serve` and `fuselm chat`.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/model_args.h"
#include "engine/engine.h"

namespace fuselm::cli {

struct EngineArgs {
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  int64_t max_waiting = 1024;
  std::string kv_cache_memory;  // bytes, with an optional K/M/G/KiB/MiB/GiB suffix
  std::string kv_cache_dtype = "auto";  // auto (as the weights: engine::kv_dtype_for_weights) | f32 | bf16
  bool no_prefix_caching = false;
  engine::EngineOptions options() const {
    return {max_num_seqs, max_num_batched_tokens, max_waiting, !no_prefix_caching};
  }
};

void add_engine_options(CLI::App& cmd, EngineArgs& a);

/// "4G", "512MiB", "1000000": bytes. Throws std::runtime_error naming --kv-cache-memory.
int64_t parse_bytes(const std::string& s);

/// Puts the pool sizing of `e` into `m` (before load_model).
void apply_pool_sizing(const EngineArgs& e, ModelArgs& m);

}  // namespace fuselm::cli
