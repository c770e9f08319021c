#pragma once
// Options of the serving engine, shared by `fuselm serve`, `fuselm chat` and `fuselm generate`,
// and the sampling flags of chat and generate (checked against engine::sampling_range, the bounds
// the server applies to the OpenAI fields).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/model_args.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"

namespace fuselm::cli {

struct EngineArgs {
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  int64_t max_waiting = 1024;
  std::string kv_cache_memory;  // bytes, with an optional K/M/G/KiB/MiB/GiB suffix
  std::string kv_cache_dtype = "auto";  // auto (as the weights: engine::kv_dtype_for_weights) | f32 | bf16 | q8_0
  bool no_prefix_caching = false;
  engine::EngineOptions options() const {
    return {max_num_seqs, max_num_batched_tokens, max_waiting, !no_prefix_caching};
  }
};

void add_engine_options(CLI::App& cmd, EngineArgs& a);

/// --temperature, --top-p, --seed (and --top-k with `top_k`), with the defaults already in the
/// struct; the values are checked by engine::sampling_range.
struct SamplingArgs {
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  int64_t seed = 0;  // any int64, as OpenAI's seed (engine::seed_from_int)
  CLI::Option* seed_option = nullptr;
  /// The seed given, else a random one (unseeded sampling is random).
  uint64_t seed_or_random() const;
  /// The parameters with `seed`.
  engine::SamplingParams params(uint64_t seed) const;
};

void add_sampling_options(CLI::App& cmd, SamplingArgs& a, bool top_k);

/// A CLI check that the value lies in `r` (NaN refused, which CLI::Range lets through).
CLI::Validator in_range(const engine::ParamRange& r);

/// "4G", "512MiB", "1000000": bytes. Throws std::runtime_error naming --kv-cache-memory.
int64_t parse_bytes(const std::string& s);

/// Puts the pool sizing of `e` into `m` (before load_model).
void apply_pool_sizing(const EngineArgs& e, ModelArgs& m);

}  // namespace fuselm::cli
