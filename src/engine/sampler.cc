#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace fuselm::engine {

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed) {
  if (p_.temperature < 0.f) throw std::invalid_argument("temperature must be >= 0");
  if (p_.top_k < 0) throw std::invalid_argument("top-k must be >= 0");
  if (!(p_.top_p > 0.f && p_.top_p <= 1.f)) throw std::invalid_argument("top-p must be in (0, 1]");
}

Sampled Sampler::sample(std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  float max = -std::numeric_limits<float>::infinity();
  int64_t argmax = 0;
  for (int64_t i = 0; i < n; ++i)
    if (logits[i] > max) {
      max = logits[i];
      argmax = i;
    }
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = std::log(z) + max;
  auto logprob = [&](int64_t t) { return static_cast<float>(logits[t] - log_z); };
  if (p_.temperature == 0.f || p_.top_k == 1) return {argmax, logprob(argmax)};

  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  int64_t keep = p_.top_k > 0 ? std::min<int64_t>(p_.top_k, n) : n;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (keep < n) {
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  probs_.resize(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += (probs_[i] = static_cast<float>(std::exp((logits[order_[i]] - max) / p_.temperature)));
  // Nucleus: the smallest prefix whose mass reaches top_p.
  if (p_.top_p < 1.f) {
    double acc = 0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      acc += probs_[i] / sum;
      if (acc >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += probs_[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (r < acc) return {order_[i], logprob(order_[i])};
  }
  return {order_[keep - 1], logprob(order_[keep - 1])};
}

}  // namespace fuselm::engine
