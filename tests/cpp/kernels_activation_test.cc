// Vectorised activations and act_and_mul against double references, on every ISA path.
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/cpu/activation.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_activation_test {

using testing::random_floats;

struct UnaryCase {
  const char* name;
  void (*kernel)(const float*, float*, int64_t);
  std::function<double(double)> ref;
};

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// x/2 · (1 + tanh(u)) = x · sigmoid(2u): the same function, without 1 + tanh cancelling in double
double gelu_tanh_ref(double x) {
  return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", unary_exp_f32, [](double x) { return std::exp(x); }},
      {"tanh", unary_tanh_f32, [](double x) { return std::tanh(x); }},
      {"sigmoid", unary_sigmoid_f32, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"silu", unary_silu_f32, silu_ref},
      {"gelu", unary_gelu_f32, gelu_ref},
      {"gelu_tanh", unary_gelu_tanh_f32, gelu_tanh_ref},
  };
}

// Inputs: a dense sweep of [-20, 20], random values, and the edges.
std::vector<float> unary_inputs() {
  std::vector<float> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  for (float v : random_floats(4099, 3, 30.f)) x.push_back(v);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 0.39999f, 0.4f, 0.40001f, -0.4f,
                  50.f, -50.f, 87.f, -87.f, 88.7f, 89.f, -89.f, -103.f, 100.f, -100.f, 1e30f,
                  -1e30f})
    x.push_back(v);
  return x;
}

// Relative error within `rel`, or an absolute error below `abs` (tiny results, underflow).
bool close(double got, double want, double rel, double abs) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

class KernelsActivation : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsActivation, UnaryMatchesReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const auto x = unary_inputs();
  for (const UnaryCase& c : unary_cases()) {
    std::vector<float> y(x.size());
    c.kernel(x.data(), y.data(), static_cast<int64_t>(x.size()));
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double want = c.ref(x[i]);
      if (std::fabs(want) > std::numeric_limits<float>::max()) want = std::copysign(INFINITY, want);
      // gelu's tails are exp of an fp32 argument ~x²/2, which carries ~x²·ulp relative error
      const double x2 = static_cast<double>(x[i]) * x[i];
      const double rel = c.name[0] == 'g' ? 2e-6 * std::max(1.0, x2 / 8) : 2e-6;
      if (!close(y[i], want, rel, 1e-30) && bad++ < 5)  // |y| < 1e-30: as good as 0
        ADD_FAILURE() << c.name << "(" << x[i] << ") = " << y[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << c.name;
    // tails of every length, in place
    for (int64_t n = 0; n < 40; ++n) {
      std::vector<float> z(x.begin() + 19990, x.begin() + 19990 + n);
      c.kernel(z.data(), z.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], y[19990 + i]) << c.name << " n " << n;
    }
  }
}

TEST_P(KernelsActivation, SpecialValues) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const float x[] = {inf, -inf, nan};
  float y[3];
  unary_exp_f32(x, y, 3);
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_TRUE(std::isnan(y[2]));
  unary_tanh_f32(x, y, 3);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], -1.f);
  EXPECT_TRUE(std::isnan(y[2]));
  unary_sigmoid_f32(x, y, 3);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_TRUE(std::isnan(y[2]));
  unary_gelu_f32(x, y, 3);
  EXPECT_EQ(y[0], inf);
  EXPECT_TRUE(std::isnan(y[2]));
}

TEST_P(KernelsActivation, ActAndMulMatchesReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const std::function<double(double)> refs[] = {silu_ref, gelu_ref, gelu_tanh_ref};
  for (Act act : {Act::silu, Act::gelu, Act::gelu_tanh}) {
    for (int64_t width : {1, 15, 16, 17, 100, 1536}) {
      for (int64_t rows : {1, 3, 40}) {
        // a fused [gate | up] GEMM output, as the GLU fuser lays it out
        const int64_t ld = 2 * width + 1;
        const auto gu = random_floats(static_cast<size_t>(rows * ld), static_cast<uint32_t>(width), 3.f);
        std::vector<float> y(static_cast<size_t>(rows * width));
        act_and_mul(act, gu.data(), ld, gu.data() + width, ld, y.data(), width, rows, width);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < width; ++i) {
            const double want = refs[static_cast<int>(act)](gu[r * ld + i]) * gu[r * ld + width + i];
            const double x2 = static_cast<double>(gu[r * ld + i]) * gu[r * ld + i];
            ASSERT_TRUE(close(y[r * width + i], want, 4e-6 * std::max(1.0, x2 / 8), 1e-30))
                << act_name(act) << " width " << width << " [" << r << "," << i
                << "] = " << y[r * width + i] << ", want " << want;
          }
        // in place over the gate half
        std::vector<float> z(gu);
        act_and_mul(act, z.data(), ld, z.data() + width, ld, z.data(), ld, rows, width);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < width; ++i) ASSERT_EQ(z[r * ld + i], y[r * width + i]);
      }
    }
  }
}

TEST_P(KernelsActivation, LargeInputsSplitOverThreads) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  testing::ScopedThreads threads(3);
  const auto x = random_floats(200003, 9, 4.f);
  std::vector<float> y(x.size()), want(x.size());
  unary_silu_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); i += 1000)  // small calls run on one thread
    unary_silu_f32(x.data() + i, want.data() + i, static_cast<int64_t>(std::min<size_t>(1000, x.size() - i)));
  EXPECT_EQ(y, want);
}

INSTANTIATE_TEST_SUITE_P(, KernelsActivation, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace kernels_activation_test
}  // namespace fuselm::kernels
