#include "engine/speculative_sampling.h"

#include <algorithm>

namespace fuselm::engine {

int64_t draw_from(std::span<const float> probs, std::mt19937_64& rng) {
  double sum = 0;
  for (float v : probs) sum += v;
  std::uniform_real_distribution<double> u(0.0, sum);
  const double r = u(rng);
  double acc = 0;
  int64_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.f) continue;
    acc += probs[i];
    last = static_cast<int64_t>(i);
    if (r < acc) return last;
  }
  return last;  // r at the very top of the range (rounding)
}

Verdict judge_draft(std::span<const float> p, std::span<const float> q, int64_t x, std::mt19937_64& rng) {
  const double px = p[static_cast<size_t>(x)], qx = q[static_cast<size_t>(x)];
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (qx > 0 && u(rng) * qx < px) return {x, true};  // u < p(x) / q(x)
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += std::max(0.f, p[i] - q[i]);
  if (mass <= 0) return {draw_from(p, rng), false};
  std::uniform_real_distribution<double> w(0.0, mass);
  const double r = w(rng);
  double acc = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const float d = std::max(0.f, p[i] - q[i]);
    if (d <= 0.f) continue;
    acc += d;
    last = static_cast<int64_t>(i);
    if (r < acc) return {last, false};
  }
  return {last, false};
}

}  // namespace fuselm::engine
