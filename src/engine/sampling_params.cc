#include "engine/sampling_params.h"

#include <fmt/core.h>

#include <stdexcept>

namespace fuselm::engine {

std::string ParamRange::interval() const { return fmt::format("{}{}, {}]", lo_open ? "(" : "[", lo, hi); }

std::string out_of_range_message(const ParamRange& r, double got) {
  return fmt::format("{} must be in {}, got {}", r.name, r.interval(), got);
}

void validate(const SamplingParams& p) {
  namespace R = sampling_range;
  const std::pair<const ParamRange&, double> checks[] = {
      {R::temperature, p.temperature},
      {R::top_p, p.top_p},
      {R::top_k, p.top_k},
      {R::min_p, p.min_p},
      {R::repetition_penalty, p.repetition_penalty},
      {R::presence_penalty, p.presence_penalty},
      {R::frequency_penalty, p.frequency_penalty},
      {R::top_logprobs, p.top_logprobs},
  };
  for (const auto& [range, value] : checks)
    if (!range.contains(value)) throw std::invalid_argument(out_of_range_message(range, value));
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) throw std::invalid_argument(fmt::format("logit_bias token id {} is negative", id));
    if (!R::logit_bias.contains(bias)) throw std::invalid_argument(out_of_range_message(R::logit_bias, bias));
  }
  if (p.min_tokens < 0) throw std::invalid_argument(fmt::format("min_tokens must be >= 0, got {}", p.min_tokens));
}

}  // namespace fuselm::engine
