// The Sampler's logit_bias and min_tokens: both change the logits sampling sees, after the
// penalties and before temperature and truncation, as vLLM's logits processors do; logprobs
// stay those of the model's own distribution.
#include <limits>

#include "engine/sampler.h"

namespace fuselm::engine {

bool Sampler::biased() const { return !p_.logit_bias.empty() || (sampled_ < p_.min_tokens && !end_tokens_.empty()); }

std::span<const float> Sampler::apply_bias(std::span<const float> logits) {
  if (logits.data() != work_.data()) work_.assign(logits.begin(), logits.end());
  const int64_t n = static_cast<int64_t>(work_.size());
  for (const auto& [id, bias] : p_.logit_bias)
    if (id < n) work_[id] += bias;
  if (sampled_ < p_.min_tokens)
    for (int64_t id : end_tokens_)
      if (id >= 0 && id < n) work_[id] = -std::numeric_limits<float>::infinity();
  return work_;
}

}  // namespace fuselm::engine
