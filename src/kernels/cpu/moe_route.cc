#include "kernels/cpu/moe_route.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

// Indices of the n largest of v[0..w) (ties to the lower index), largest first.
void top_n(const float* v, int64_t w, int64_t n, std::vector<int64_t>& order) {
  order.resize(static_cast<size_t>(w));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int64_t a, int64_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
}

void route_row(const MoeRouteArgs& a, int64_t r, std::vector<float>& scores, std::vector<float>& choice,
               std::vector<float>& group, std::vector<int64_t>& order) {
  const float* lg = a.logits + r * a.e;
  scores.resize(static_cast<size_t>(a.e));
  choice.resize(static_cast<size_t>(a.e));
  if (a.scoring == MoeScoring::softmax) {
    const float m = *std::max_element(lg, lg + a.e);
    double sum = 0;
    for (int64_t j = 0; j < a.e; ++j) sum += (scores[j] = std::exp(lg[j] - m));
    for (int64_t j = 0; j < a.e; ++j) scores[j] = static_cast<float>(scores[j] / sum);
  } else if (a.scoring == MoeScoring::sigmoid) {
    for (int64_t j = 0; j < a.e; ++j) scores[j] = 1.0f / (1.0f + std::exp(-lg[j]));
  } else {
    std::copy_n(lg, a.e, scores.begin());
  }
  for (int64_t j = 0; j < a.e; ++j) choice[j] = scores[j] + (a.correction ? a.correction[j] : 0.0f);
  if (a.groups > 1) {
    const int64_t per = a.e / a.groups;
    group.resize(static_cast<size_t>(a.groups));
    for (int64_t gi = 0; gi < a.groups; ++gi) {
      const float* c = choice.data() + gi * per;
      if (a.group_score == MoeGroupScore::max) {
        group[gi] = *std::max_element(c, c + per);
      } else {
        top_n(c, per, std::min<int64_t>(2, per), order);
        group[gi] = c[order[0]] + (per > 1 ? c[order[1]] : 0.0f);
      }
    }
    top_n(group.data(), a.groups, a.topk_group, order);
    std::vector<char> keep(static_cast<size_t>(a.groups), 0);
    for (int64_t j = 0; j < a.topk_group; ++j) keep[order[j]] = 1;
    for (int64_t j = 0; j < a.e; ++j)
      if (!keep[j / per]) choice[j] = -std::numeric_limits<float>::infinity();
  }
  top_n(choice.data(), a.e, a.k, order);
  float* w = a.weights + r * a.k;
  int64_t* ids = a.ids + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) {
    ids[j] = order[j];
    w[j] = scores[order[j]];
  }
  if (a.scoring == MoeScoring::softmax_of_topk) {
    const float m = *std::max_element(w, w + a.k);
    double sum = 0;
    for (int64_t j = 0; j < a.k; ++j) sum += (w[j] = std::exp(w[j] - m));
    for (int64_t j = 0; j < a.k; ++j) w[j] = static_cast<float>(w[j] / sum);
  }
  if (a.renorm) {
    float sum = 0;
    for (int64_t j = 0; j < a.k; ++j) sum += w[j];
    sum += a.renorm_eps;
    for (int64_t j = 0; j < a.k; ++j) w[j] /= sum;
  }
  if (a.scaling != 1.0f)
    for (int64_t j = 0; j < a.k; ++j) w[j] *= a.scaling;
}

}  // namespace

void moe_route(const MoeRouteArgs& a) {
  if (!a.logits || !a.weights || !a.ids) throw std::invalid_argument("moe_route: null pointer argument");
  if (a.k < 1 || a.k > a.e)
    throw std::invalid_argument("moe_route: top_k " + std::to_string(a.k) + " is outside [1, " + std::to_string(a.e) + "]");
  if (a.groups > 1) {
    if (a.e % a.groups != 0 || a.topk_group < 1 || a.topk_group > a.groups || a.group_score == MoeGroupScore::none)
      throw std::invalid_argument("moe_route: " + std::to_string(a.e) + " experts cannot keep " +
                                  std::to_string(a.topk_group) + " of " + std::to_string(a.groups) + " groups");
    if (a.topk_group * (a.e / a.groups) < a.k)
      throw std::invalid_argument("moe_route: the kept groups hold fewer than top_k experts");
  }
  const int nt = kernel_threads(a.t, 64);
  parallel_for_ranges(nt, a.t, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, choice, group;
    std::vector<int64_t> order;
    for (int64_t r = begin; r < end; ++r) route_row(a, r, scores, choice, group, order);
  });
}

}  // namespace fuselm::kernels
