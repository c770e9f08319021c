// rms_norm, layer_norm and softmax against double references, on every ISA path.
#include <cmath>

#include <fmt/format.h>

#include "kernels/cpu/norm.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_norm_test {

using testing::random_floats;

constexpr int64_t kWidths[] = {1, 7, 16, 33, 64, 100, 576, 1031};

bool close(double got, double want, double rel = 2e-6, double abs = 2e-6) {
  return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

class KernelsNorm : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsNorm, RmsNormMatchesReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (int64_t width : kWidths) {
    for (int variant = 0; variant < 3; ++variant) {  // weight, (1 + weight), no weight
      const int64_t rows = 5, ldx = width + 3, ldy = width + 1;
      const auto x = random_floats(static_cast<size_t>(rows * ldx), static_cast<uint32_t>(width), 3.f);
      const auto w = random_floats(static_cast<size_t>(width), static_cast<uint32_t>(width) + 1);
      const float eps = 1e-6f, offset = variant == 1 ? 1.f : 0.f;
      const float* wp = variant == 2 ? nullptr : w.data();
      std::vector<float> y(static_cast<size_t>(rows * ldy));
      rms_norm(x.data(), ldx, wp, y.data(), ldy, rows, width, eps, offset);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(x[r * ldx + i]) * x[r * ldx + i];
        const double s = 1 / std::sqrt(ss / width + eps);
        for (int64_t i = 0; i < width; ++i) {
          const double want = x[r * ldx + i] * s * (wp ? w[i] + offset : 1.0);
          ASSERT_TRUE(close(y[r * ldy + i], want))
              << "width " << width << " variant " << variant << " [" << r << "," << i
              << "] = " << y[r * ldy + i] << ", want " << want;
        }
      }
      // in place
      std::vector<float> z(x);
      rms_norm(z.data(), ldx, wp, z.data(), ldx, rows, width, eps, offset);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) ASSERT_EQ(z[r * ldx + i], y[r * ldy + i]);
    }
  }
}

TEST_P(KernelsNorm, LayerNormMatchesReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (int64_t width : kWidths) {
    for (int variant = 0; variant < 4; ++variant) {  // bit 0: weight, bit 1: bias
      const int64_t rows = 4, ld = width + 2;
      auto x = random_floats(static_cast<size_t>(rows * ld), static_cast<uint32_t>(width) + 5, 2.f);
      for (float& v : x) v += 10.f;  // an offset mean: the two-pass variance must not cancel
      const auto w = random_floats(static_cast<size_t>(width), 7);
      const auto b = random_floats(static_cast<size_t>(width), 8);
      const float* wp = variant & 1 ? w.data() : nullptr;
      const float* bp = variant & 2 ? b.data() : nullptr;
      std::vector<float> y(static_cast<size_t>(rows * ld));
      layer_norm(x.data(), ld, wp, bp, y.data(), ld, rows, width, 1e-5f);
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < width; ++i) mean += x[r * ld + i];
        mean /= width;
        for (int64_t i = 0; i < width; ++i) var += (x[r * ld + i] - mean) * (x[r * ld + i] - mean);
        var /= width;
        for (int64_t i = 0; i < width; ++i) {
          double want = (x[r * ld + i] - mean) / std::sqrt(var + 1e-5);
          if (wp) want *= w[i];
          if (bp) want += b[i];
          ASSERT_TRUE(close(y[r * ld + i], want, 1e-5, 1e-5))
              << "width " << width << " variant " << variant << " [" << r << "," << i
              << "] = " << y[r * ld + i] << ", want " << want;
        }
      }
    }
  }
}

TEST_P(KernelsNorm, SoftmaxMatchesReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (int64_t width : kWidths) {
    const int64_t rows = 6, ld = width + 5;
    auto x = random_floats(static_cast<size_t>(rows * ld), static_cast<uint32_t>(width) + 9, 4.f);
    x[0] = -std::numeric_limits<float>::infinity();  // a masked logit (row 0 keeps others)
    if (width > 1) x[1] = 80.f;                      // large logits must not overflow
    std::vector<float> y(static_cast<size_t>(rows * ld));
    softmax(x.data(), ld, y.data(), ld, rows, width);
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 0 && width == 1) continue;  // a row of only -inf is NaN, as in torch
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < width; ++i) mx = std::max(mx, static_cast<double>(x[r * ld + i]));
      for (int64_t i = 0; i < width; ++i) sum += std::exp(x[r * ld + i] - mx);
      for (int64_t i = 0; i < width; ++i) {
        const double want = std::exp(x[r * ld + i] - mx) / sum;
        ASSERT_TRUE(close(y[r * ld + i], want, 1e-5, 1e-7))
            << "width " << width << " [" << r << "," << i << "] = " << y[r * ld + i] << ", want " << want;
      }
    }
  }
}

TEST_P(KernelsNorm, ManyRowsUseThreads) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  testing::ScopedThreads threads(3);
  const int64_t rows = 301, width = 576;
  const auto x = random_floats(static_cast<size_t>(rows * width), 1);
  std::vector<float> y(x.size()), want(x.size());
  for (int64_t r = 0; r < rows; ++r)  // one row at a time: serial
    rms_norm(x.data() + r * width, width, nullptr, want.data() + r * width, width, 1, width, 1e-5f, 0.f);
  rms_norm(x.data(), width, nullptr, y.data(), width, rows, width, 1e-5f, 0.f);
  EXPECT_EQ(y, want);
}

INSTANTIATE_TEST_SUITE_P(, KernelsNorm, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace kernels_norm_test
}  // namespace fuselm::kernels
