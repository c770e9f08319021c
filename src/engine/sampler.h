#pragma once
// Token sampling from one row of logits: greedy, temperature, top-k, top-p, seeded.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace fuselm::engine {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;        // 0: all tokens
  float top_p = 1.f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;
};

struct Sampled {
  int64_t token = 0;
  float logprob = 0.f;  // log-softmax of the raw logits at `token`
};

/// Samples with its own generator seeded from params.seed; buffers are reused across calls, so
/// steady-state sampling allocates nothing. Throws std::invalid_argument on bad parameters.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  Sampled sample(std::span<const float> logits);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<float> probs_;
};

}  // namespace fuselm::engine
