#include "engine/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace fuselm::engine {

TokenOut prompt_token_logprob(std::span<const float> row, int64_t token, int32_t top) {
  const int64_t n = static_cast<int64_t>(row.size());
  double max = -std::numeric_limits<double>::infinity();
  for (float x : row) max = std::max<double>(max, x);
  double z = 0;
  for (float x : row) z += std::exp(static_cast<double>(x) - max);
  const double log_z = std::log(z) + max;
  TokenOut out{token, static_cast<float>(row[token] - log_z), {}};
  const int64_t k = std::min<int64_t>(top, n);
  if (k <= 0) return out;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out.top.emplace_back(order[i], static_cast<float>(row[order[i]] - log_z));
  return out;
}

}  // namespace fuselm::engine
