#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace fuselm::engine {

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed) {
  validate(p_);
}

void Sampler::set_prompt(std::span<const int64_t> prompt) { prompt_.assign(prompt.begin(), prompt.end()); }

bool Sampler::penalized() const {
  return p_.repetition_penalty != 1.f || p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f;
}

std::span<const float> Sampler::apply_penalties(std::span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  const int64_t n = static_cast<int64_t>(work_.size());
  auto repeat = [&](int64_t t) {
    if (t < 0 || t >= n) return;
    work_[t] = work_[t] > 0 ? work_[t] / p_.repetition_penalty : work_[t] * p_.repetition_penalty;
  };
  if (p_.repetition_penalty != 1.f) {
    // Each distinct token once: mark with the output counts, then the prompt's not yet seen.
    for (const auto& [t, c] : output_counts_) repeat(t);
    std::vector<int64_t> seen;
    for (int64_t t : prompt_)
      if (!output_counts_.contains(t)) seen.push_back(t);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int64_t t : seen) repeat(t);
  }
  for (const auto& [t, c] : output_counts_)
    if (t >= 0 && t < n) work_[t] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(c);
  return work_;
}

void Sampler::fill_top(std::span<const float> raw, double log_z, Sampled& out) {
  out.top.clear();
  if (p_.top_logprobs == 0) return;
  const int64_t n = static_cast<int64_t>(raw.size());
  const int64_t k = std::min<int64_t>(p_.top_logprobs, n);
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                    [&](int32_t a, int32_t b) { return raw[a] > raw[b] || (raw[a] == raw[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out.top.emplace_back(order_[i], static_cast<float>(raw[order_[i]] - log_z));
}

int64_t Sampler::draw_untruncated(std::span<const float> logits, float max) {
  // No top-k, top-p or min-p: softmax(logits / T) over the vocabulary in id order, no sort (a sort
  // of the vocabulary per token would cost more than the rest of a batched decode step's sampling).
  const int64_t n = static_cast<int64_t>(logits.size());
  probs_.resize(n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (probs_[i] = static_cast<float>(std::exp((logits[i] - max) / p_.temperature)));
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probs_[i] == 0.f) continue;
    acc += probs_[i];
    last = i;
    if (r < acc) return i;
  }
  return last;  // r at the very top of the range (rounding)
}

std::span<const float> Sampler::apply_mask(std::span<const float> logits, std::span<const int32_t> allowed) {
  // Disallowed tokens' logits to -inf, a whole 32-token word at a time when none is allowed.
  if (logits.data() != work_.data()) work_.assign(logits.begin(), logits.end());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = work_.size();
  for (size_t w = 0; w < allowed.size() && w * 32 < n; ++w) {
    const auto bits = static_cast<uint32_t>(allowed[w]);
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    if (bits == 0) {
      std::fill(work_.begin() + static_cast<std::ptrdiff_t>(w * 32), work_.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (uint32_t off = ~bits; off != 0; off &= off - 1) {  // each disallowed id of the word
      const size_t i = w * 32 + static_cast<size_t>(std::countr_zero(off));
      if (i < end) work_[i] = kNegInf;
    }
  }
  for (size_t i = allowed.size() * 32; i < n; ++i) work_[i] = kNegInf;
  return work_;
}

double Sampler::log_normalizer(std::span<const float> raw) {
  double raw_max = -std::numeric_limits<double>::infinity();
  for (float v : raw) raw_max = std::max<double>(raw_max, v);
  double raw_z = 0;
  for (float v : raw) raw_z += std::exp(static_cast<double>(v) - raw_max);
  return std::log(raw_z) + raw_max;
}

Sampled Sampler::commit(std::span<const float> raw, double log_z, int64_t t, bool logprobs) {
  Sampled s{t, logprobs ? static_cast<float>(raw[t] - log_z) : 0.f, {}};
  if (logprobs) fill_top(raw, log_z, s);
  ++output_counts_[t];
  ++sampled_;
  return s;
}

std::span<const float> Sampler::processed(std::span<const float> raw, std::span<const int32_t> allowed) {
  std::span<const float> logits = penalized() ? apply_penalties(raw) : raw;
  if (biased()) logits = apply_bias(logits);
  if (!allowed.empty()) logits = apply_mask(logits, allowed);
  return logits;
}

int64_t Sampler::truncate(std::span<const float> logits, float max, double& sum) {
  // order_[0, keep) the kept ids, best first; probs_[0, keep) their weights exp((l - max) / T).
  const int64_t n = static_cast<int64_t>(logits.size());
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
  sum = 0;
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
  // min-p: probs_ are sorted and probs_[0] is the top probability (relative, exp(0) = 1).
  if (p_.min_p > 0.f) {
    int64_t cut = 1;
    while (cut < keep && probs_[cut] >= p_.min_p * probs_[0]) ++cut;
    keep = cut;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += probs_[i];
  }
  return keep;
}

namespace {

int64_t argmax_of(std::span<const float> logits, float& max) {
  max = -std::numeric_limits<float>::infinity();
  int64_t argmax = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > max) {
      max = logits[i];
      argmax = static_cast<int64_t>(i);
    }
  return argmax;
}

}  // namespace

bool Sampler::greedy() const { return p_.temperature == 0.f || p_.top_k == 1; }

Sampled Sampler::sample(std::span<const float> raw, bool logprobs, std::span<const int32_t> allowed) {
  // logprobs are of the model's own distribution; sampling sees the penalized logits.
  const double log_z = logprobs ? log_normalizer(raw) : 0.0;
  const std::span<const float> logits = processed(raw, allowed);
  float max = 0;
  const int64_t argmax = argmax_of(logits, max);
  if (greedy()) return commit(raw, log_z, argmax, logprobs);
  if (p_.top_k <= 0 && p_.top_p >= 1.f && p_.min_p <= 0.f) return commit(raw, log_z, draw_untruncated(logits, max), logprobs);
  double sum = 0;
  const int64_t keep = truncate(logits, max, sum);
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (r < acc) return commit(raw, log_z, order_[i], logprobs);
  }
  return commit(raw, log_z, order_[keep - 1], logprobs);
}

void Sampler::distribution(std::span<const float> raw, std::vector<float>& out) {
  const std::span<const float> logits = processed(raw, {});
  const int64_t n = static_cast<int64_t>(logits.size());
  out.assign(static_cast<size_t>(n), 0.f);
  float max = 0;
  const int64_t argmax = argmax_of(logits, max);
  if (greedy()) {
    out[argmax] = 1.f;
    return;
  }
  double sum = 0;
  const int64_t keep = truncate(logits, max, sum);
  for (int64_t i = 0; i < keep; ++i) out[order_[i]] = static_cast<float>(probs_[i] / sum);
}

Sampled Sampler::take(std::span<const float> raw, int64_t token, bool logprobs) {
  return commit(raw, logprobs ? log_normalizer(raw) : 0.0, token, logprobs);
}

}  // namespace fuselm::engine
