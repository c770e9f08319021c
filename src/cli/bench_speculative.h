#pragma once
// fuselm bench --speculative-method: plain greedy decoding and speculative decoding of one real
// prompt, side by side in one process (alternating, repetition by repetition, so a noisy machine
// slows both alike), with the acceptance rate, the mean accepted length and whether the two
// outputs are the same tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/model_args.h"
#include "cli/speculative_args.h"

namespace fuselm::cli {

struct SpecBenchArgs {
  std::string model_dir;
  std::vector<std::string> dtypes;
  std::vector<int> threads;
  std::string prompt_file;  // --prompt-file: the prompt's text
  bool chat = false;        // --chat: rendered with the model's chat template as one user message
  int64_t n_gen = 128;      // tokens to generate at most (-n, its first value)
  int reps = 3;
  FuserArgs fusers;
  std::string kv_cache_dtype = "auto";
};

/// Runs the comparison for every dtype and thread count and prints a markdown table (one row
/// each: decode tokens/s without and with speculation, their ratio as the median of the
/// repetitions' ratios, the acceptance, the mean accepted length, identical outputs). Throws
/// std::runtime_error for a missing prompt file or a model without a tokenizer.
void bench_speculative(const SpecBenchArgs& a, const SpeculativeArgs& spec);

}  // namespace fuselm::cli
