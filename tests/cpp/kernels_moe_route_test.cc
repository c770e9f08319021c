// kernels::moe_route against a straightforward double-precision router: every scoring, grouped
// top-k by top-2 sum and by max, correction bias, renorm with eps, scaling; logits on a coarse
// grid so that ties are common (the kernel must pick the lower index, as the ATen top-k does);
// the row-threaded path equal to the single-threaded one; the argument checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/moe_route.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_moe_route_test {

using testing::random_floats;

// Stable descending order: equal values keep index order (ties to the lower index).
std::vector<int64_t> order_of(const std::vector<double>& v) {
  std::vector<int64_t> o(v.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  return o;
}

void reference(const MoeRouteArgs& a, std::vector<double>& weights, std::vector<int64_t>& ids) {
  weights.assign(static_cast<size_t>(a.t * a.k), 0.0);
  ids.assign(static_cast<size_t>(a.t * a.k), -1);
  for (int64_t r = 0; r < a.t; ++r) {
    const float* lg = a.logits + r * a.e;
    std::vector<double> sc(a.e), ch(a.e);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < a.e; ++j) mx = std::max(mx, double(lg[j]));
    for (int64_t j = 0; j < a.e; ++j) sum += std::exp(lg[j] - mx);
    for (int64_t j = 0; j < a.e; ++j) {
      sc[j] = a.scoring == MoeScoring::softmax   ? std::exp(lg[j] - mx) / sum
              : a.scoring == MoeScoring::sigmoid ? 1.0 / (1.0 + std::exp(-double(lg[j])))
                                                 : double(lg[j]);
      ch[j] = sc[j] + (a.correction ? a.correction[j] : 0.0);
    }
    if (a.groups > 1) {
      const int64_t per = a.e / a.groups;
      std::vector<double> gs(a.groups);
      for (int64_t g = 0; g < a.groups; ++g) {
        std::vector<double> part(ch.begin() + g * per, ch.begin() + (g + 1) * per);
        const auto o = order_of(part);
        gs[g] = a.group_score == MoeGroupScore::max ? part[o[0]] : part[o[0]] + part[o[1]];
      }
      const auto go = order_of(gs);
      for (int64_t j = 0; j < a.e; ++j)
        if (std::find(go.begin(), go.begin() + a.topk_group, j / per) == go.begin() + a.topk_group) ch[j] = -INFINITY;
    }
    const auto o = order_of(ch);
    std::vector<double> w(a.k);
    for (int64_t j = 0; j < a.k; ++j) w[j] = sc[o[j]];
    if (a.scoring == MoeScoring::softmax_of_topk) {
      const double m = *std::max_element(w.begin(), w.end());
      double s = 0;
      for (auto& v : w) s += (v = std::exp(v - m));
      for (auto& v : w) v /= s;
    }
    double tot = a.renorm_eps;
    for (double v : w) tot += v;
    for (int64_t j = 0; j < a.k; ++j) {
      weights[r * a.k + j] = (a.renorm ? w[j] / tot : w[j]) * a.scaling;
      ids[r * a.k + j] = o[j];
    }
  }
}

struct Case {
  const char* what;
  MoeScoring scoring;
  int64_t e, k, groups = 1, topk_group = 1;
  MoeGroupScore group_score = MoeGroupScore::none;
  bool correction = false, renorm = false;
  float eps = 0.0f, scaling = 1.0f;
};

// Logits on a grid of 0.5 in [-2, 2]: with 8 to 16 experts most rows hold equal logits.
std::vector<float> grid_logits(int64_t n, uint32_t seed) {
  auto v = random_floats(static_cast<size_t>(n), seed, 1.2f);
  for (float& x : v) x = std::clamp(std::round(x * 2.0f) / 2.0f, -2.0f, 2.0f);
  return v;
}

TEST(KernelsMoeRoute, MatchesReferenceWithTiesAndThreads) {
  const Case cases[] = {
      {"softmax top-2 renorm", MoeScoring::softmax, 8, 2, 1, 1, MoeGroupScore::none, false, true},
      {"sigmoid top-3 scaled", MoeScoring::sigmoid, 8, 3, 1, 1, MoeGroupScore::none, false, false, 0.0f, 2.5f},
      {"sigmoid, correction bias, 2 of 4 groups by top-2 sum, renorm eps, scaled", MoeScoring::sigmoid, 16, 4, 4, 2,
       MoeGroupScore::top2_sum, true, true, 1e-20f, 2.5f},
      {"softmax, 1 of 4 groups by max", MoeScoring::softmax, 16, 3, 4, 1, MoeGroupScore::max},
      {"softmax of the top-4 logits", MoeScoring::softmax_of_topk, 8, 4},
      {"top-1 of 1 expert", MoeScoring::softmax, 1, 1},
  };
  const int64_t t = 300;  // enough rows for the row-threaded path
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto logits = grid_logits(t * c.e, static_cast<uint32_t>(c.e * 31 + c.k));
    auto bias = random_floats(static_cast<size_t>(c.e), 5, 0.3f);
    for (float& b : bias) b = std::round(b * 8.0f) / 8.0f;
    MoeRouteArgs a;
    a.logits = logits.data();
    a.correction = c.correction ? bias.data() : nullptr;
    a.t = t;
    a.e = c.e;
    a.k = c.k;
    a.scoring = c.scoring;
    a.groups = c.groups;
    a.topk_group = c.topk_group;
    a.group_score = c.group_score;
    a.renorm = c.renorm;
    a.renorm_eps = c.eps;
    a.scaling = c.scaling;
    std::vector<double> want_w;
    std::vector<int64_t> want_i;
    reference(a, want_w, want_i);
    int tied_rows = 0;  // rows whose chosen experts include a tie the index order breaks
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 1; j < c.k; ++j)
        if (c.scoring != MoeScoring::sigmoid && !c.correction &&
            logits[r * c.e + want_i[r * c.k + j]] == logits[r * c.e + want_i[r * c.k + j - 1]])
          ++tied_rows;
    if (c.e > c.k && c.scoring != MoeScoring::sigmoid) EXPECT_GT(tied_rows, 0) << "the grid made no ties";
    std::vector<float> one_w;
    std::vector<int64_t> one_i;
    for (int threads : {1, 4}) {
      testing::ScopedThreads scoped(threads);
      std::vector<float> w(static_cast<size_t>(t * c.k), NAN);
      std::vector<int64_t> ids(static_cast<size_t>(t * c.k), -7);
      a.weights = w.data();
      a.ids = ids.data();
      moe_route(a);
      for (int64_t i = 0; i < t * c.k; ++i) {
        ASSERT_EQ(ids[i], want_i[i]) << "row " << i / c.k << " slot " << i % c.k << ", " << threads << " threads";
        ASSERT_NEAR(w[i], want_w[i], 1e-6 * std::max(1.0, std::fabs(want_w[i]))) << "row " << i / c.k;
      }
      if (threads == 1) {
        one_w = w;
        one_i = ids;
      } else {
        EXPECT_EQ(w, one_w);  // rows are independent: threading changes nothing
        EXPECT_EQ(ids, one_i);
      }
    }
  }
}

TEST(KernelsMoeRoute, EqualLogitsPickTheLowestIndices) {
  const std::vector<float> logits(2 * 8, 0.5f);
  std::vector<float> w(2 * 3);
  std::vector<int64_t> ids(2 * 3);
  MoeRouteArgs a;
  a.logits = logits.data();
  a.t = 2;
  a.e = 8;
  a.k = 3;
  a.groups = 4;
  a.topk_group = 2;
  a.group_score = MoeGroupScore::top2_sum;
  a.weights = w.data();
  a.ids = ids.data();
  moe_route(a);
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));  // groups 0 and 1 kept, then experts 0..2
  for (float v : w) EXPECT_FLOAT_EQ(v, 0.125f);
}

TEST(KernelsMoeRoute, RejectsArgumentsItCannotRoute) {
  const std::vector<float> logits(8, 0.0f);
  std::vector<float> w(8);
  std::vector<int64_t> ids(8);
  auto args = [&] {
    MoeRouteArgs a;
    a.logits = logits.data();
    a.t = 1;
    a.e = 8;
    a.k = 2;
    a.weights = w.data();
    a.ids = ids.data();
    return a;
  };
  auto expect_error = [](const MoeRouteArgs& a, const std::string& text) {
    try {
      moe_route(a);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  MoeRouteArgs a = args();
  a.k = 0;
  expect_error(a, "top_k 0 is outside [1, 8]");
  a.k = 9;
  expect_error(a, "top_k 9 is outside [1, 8]");
  a = args();
  a.groups = 3;
  a.group_score = MoeGroupScore::max;
  expect_error(a, "8 experts cannot keep 1 of 3 groups");
  a.groups = 4;
  a.topk_group = 5;
  expect_error(a, "8 experts cannot keep 5 of 4 groups");
  a.topk_group = 1;
  a.group_score = MoeGroupScore::none;
  expect_error(a, "8 experts cannot keep 1 of 4 groups");
  a.group_score = MoeGroupScore::top2_sum;
  a.k = 3;
  expect_error(a, "the kept groups hold fewer than top_k experts");
  a = args();
  a.ids = nullptr;
  expect_error(a, "null pointer argument");
}

}  // namespace kernels_moe_route_test
}  // namespace fuselm::kernels
