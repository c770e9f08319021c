// dtype conversions: bf16/f16 <-> f32 against brute-force references, and convert_dtype.
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/cpu/dtype.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_dtype_test {

// fp16 value of bits h, computed from the definition
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  if (exp == 31) v = man ? std::nan("") : INFINITY;
  return sign ? -v : v;
}

// nearest fp16 to f, ties to even, by search over all finite fp16 values
uint16_t f16_reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff;  // largest finite value not above a, by binary search
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (f16_value(mid) <= a) lo = mid; else hi = static_cast<uint16_t>(mid - 1);
  }
  const double below = f16_value(lo), above = f16_value(static_cast<uint16_t>(lo + 1));
  uint16_t r = lo;
  if (a - below > above - a || (a - below == above - a && (lo & 1))) r = static_cast<uint16_t>(lo + 1);
  return sign | r;
}

uint16_t bf16_reference(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  const double a = std::fabs(static_cast<double>(f));
  const double d_down = a - std::fabs(static_cast<double>(std::bit_cast<float>(down)));
  // the value above may be infinity (bits 0x7f80): treat its distance as that of 2^128
  const float fu = std::bit_cast<float>(up);
  const double vu = std::isinf(fu) ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(fu));
  const double d_up = vu - a;
  if (d_down < d_up || (d_down == d_up && ((down >> 16) & 1) == 0)) return static_cast<uint16_t>(down >> 16);
  return static_cast<uint16_t>(up >> 16);
}

TEST(KernelsDType, Names) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    EXPECT_EQ(find_dtype(dtype_name(d)), d);
    EXPECT_EQ(storage_dtype(d), d);
  }
  EXPECT_FALSE(find_dtype("fp8"));
  EXPECT_FALSE(find_dtype("f8_e4m3"));  // a weight file's dtype, not the IR's
  EXPECT_FALSE(storage_dtype(DType::i64));
  EXPECT_EQ(dtype_size(DType::f32), 4);
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::c64), 8);
  EXPECT_EQ(dtype_size(DType::boolean), 1);
}

TEST(KernelsDType, F16ToF32IsExactForEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double want = f16_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    ASSERT_EQ(f32_to_f16(f), h) << "round trip of " << h;
  }
}

TEST(KernelsDType, F32ToF16RoundsToNearestEven) {
  std::vector<float> xs = {0.f, -0.f, 1.f, 65504.f, 65519.f, 65520.f, 1e9f, -1e9f, 1e-8f,
                           5.9604645e-8f, 2.9802322e-8f, 2.98e-8f, 3e-8f, 6.1035156e-5f,
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // midpoints between neighbours (exact ties) and around
    const float mid = static_cast<float>((f16_value(static_cast<uint16_t>(h)) +
                                          f16_value(static_cast<uint16_t>(h + 1))) / 2);
    xs.push_back(mid);
    xs.push_back(std::nextafter(mid, 0.f));
    xs.push_back(std::nextafter(mid, 1e30f));
    xs.push_back(-mid);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> e(-30.f, 17.f);
  for (int i = 0; i < 100000; ++i) xs.push_back(std::ldexp(1.f + (rng() % 1000000) * 1e-6f, static_cast<int>(e(rng))));
  for (float f : xs) ASSERT_EQ(f32_to_f16(f), f16_reference(f)) << f;
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(KernelsDType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.f);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = f32_to_bf16(std::bit_cast<float>(0x7f800001u));  // NaN whose top bits look like inf
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), bf16_reference(f)) << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) ASSERT_EQ(f32_to_bf16(f), h);
  }
}

TEST(KernelsDType, ConvertDtypeEveryPair) {
  const auto src = testing::random_floats(300001, 5, 100.f);
  for (DType from : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<unsigned char> a(src.size() * dtype_size(from));
    convert_dtype(src.data(), DType::f32, a.data(), from, static_cast<int64_t>(src.size()));
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      std::vector<unsigned char> b(src.size() * dtype_size(to));
      convert_dtype(a.data(), from, b.data(), to, static_cast<int64_t>(src.size()));
      for (size_t i = 0; i < src.size(); i += 97) {
        const float v = load_as_f32(a.data(), from, static_cast<int64_t>(i));
        const float want = to == DType::f32    ? v
                           : to == DType::bf16 ? bf16_to_f32(f32_to_bf16(v))
                                               : f16_to_f32(f32_to_f16(v));
        ASSERT_EQ(load_as_f32(b.data(), to, static_cast<int64_t>(i)), want)
            << dtype_name(from) << " -> " << dtype_name(to) << " at " << i;
      }
    }
  }
}

}  // namespace kernels_dtype_test
}  // namespace fuselm::kernels
