#pragma once
// A request's sampling parameters and the one check of their values that every entry point
// applies (the server's OpenAI fields, `fuselm chat` and `fuselm generate` flags, the engine's
// submit through the Sampler): OpenAI's bounds, so a request means the same everywhere.
#include <cstdint>
#include <string>
#include <string_view>

namespace fuselm::engine {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;        // 0: all tokens
  float top_p = 1.f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;        // see seed_from_int
  float min_p = 0.f;               // drop tokens below min_p x the top probability; [0, 1]
  float repetition_penalty = 1.f;  // (0, 100]; over prompt and output tokens: logit/p if > 0, else logit*p
  float presence_penalty = 0.f;    // [-2, 2]; subtracted once from each token seen in the output
  float frequency_penalty = 0.f;   // [-2, 2]; subtracted per occurrence in the output
  int32_t top_logprobs = 0;        // alternatives reported per token, [0, 20]
};

/// The values one sampling parameter accepts: [lo, hi], or (lo, hi] when lo_open. NaN is never in.
struct ParamRange {
  std::string_view name;  // as the OpenAI field is spelt ("top_p")
  double lo = 0, hi = 0;
  bool lo_open = false;
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }
  /// "[0, 2]" or "(0, 1]".
  std::string interval() const;
};

/// The bounds of each parameter (OpenAI's, and vLLM's for the fields OpenAI lacks).
namespace sampling_range {
inline constexpr ParamRange temperature{"temperature", 0, 2};
inline constexpr ParamRange top_p{"top_p", 0, 1, true};
inline constexpr ParamRange top_k{"top_k", 0, 1 << 30};  // the server also takes -1 (vLLM's "all") as 0
inline constexpr ParamRange min_p{"min_p", 0, 1};
inline constexpr ParamRange repetition_penalty{"repetition_penalty", 0, 100, true};
inline constexpr ParamRange presence_penalty{"presence_penalty", -2, 2};
inline constexpr ParamRange frequency_penalty{"frequency_penalty", -2, 2};
inline constexpr ParamRange top_logprobs{"top_logprobs", 0, 20};
}  // namespace sampling_range

/// "temperature must be in [0, 2], got 3": the message for a value outside `r`.
std::string out_of_range_message(const ParamRange& r, double got);

/// Throws std::invalid_argument (out_of_range_message) for the first parameter of `p` outside
/// its sampling_range.
void validate(const SamplingParams& p);

/// The sampler's seed for a request's integer seed: every int64 is a seed (OpenAI's `seed` type);
/// a negative one wraps, as the server has always read it.
inline uint64_t seed_from_int(int64_t seed) { return static_cast<uint64_t>(seed); }

/// The seed of a request's choice `index` (n > 1): choice 0 keeps the request's seed (so n = 1 is
/// unchanged), the others get splitmix64 of it and their index, so each samples its own way and
/// the same seeded request gives the same choices.
inline uint64_t choice_seed(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace fuselm::engine
