// linear and matmul_batched against double-precision references, on every ISA path.
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/matmul_batched.h"
#include "kernels/cpu/tuning.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_linear_test {

using testing::random_floats;
using testing::random_weights;

struct LinearCase {
  int64_t m, n, k;
  DType dtype = DType::f32;
  WeightLayout layout = WeightLayout::nk;
  bool bias = false;
  int64_t pad = 0;  // extra elements on every row stride (views)
  int threads = 0;  // 0: default
  bool pack = false;  // W packed at load (PackedLinearWeights), where the path packs this dtype
  std::string name() const {
    return fmt::format("m{}_n{}_k{}_{}_{}{}{}{}{}", m, n, k, dtype_name(dtype),
                       layout == WeightLayout::nk ? "nk" : "kn", bias ? "_bias" : "",
                       pad ? fmt::format("_pad{}", pad) : "",
                       threads ? fmt::format("_t{}", threads) : "", pack ? "_packed" : "");
  }
};

// Whether the current path rounds x to bf16 for bf16 weights: avx512bf16 always, amx for more than
// the 8 rows of a GEMV pass (its GEMM runs on AMX tiles, its GEMV widens the weights).
bool rounds_x(DType d, int64_t m) {
  if (d != DType::bf16) return false;
  return cpu_isa() == Isa::avx512bf16 || (cpu_isa() == Isa::amx && m > 8);
}

// Runs the case on the current ISA and checks every element against a double reference:
// |y - ref| <= 1e-4·|ref| + 2e-6·sum_p |x·w|   (fp32 accumulation over k terms), where the
// reference takes x rounded to bf16 on the path that does so (rounds_x).
void check_linear(const LinearCase& c, uint32_t seed) {
  const int64_t lda = c.k + c.pad, ldy = c.n + c.pad;
  const bool nk = c.layout == WeightLayout::nk;
  const int64_t ldw = (nk ? c.k : c.n) + c.pad;
  const int64_t w_rows = nk ? c.n : c.k;
  const auto x = random_floats(static_cast<size_t>(c.m * lda), seed);
  const auto w = random_weights(static_cast<size_t>(w_rows * ldw), c.dtype, seed + 1);
  const auto bias = random_floats(static_cast<size_t>(c.n), seed + 2);
  std::vector<float> y(static_cast<size_t>(c.m * ldy), -7.f);
  std::optional<testing::ScopedThreads> threads;
  if (c.threads) threads.emplace(c.threads);
  const auto packed = c.pack ? PackedLinearWeights::pack(w.data(), c.dtype, c.layout, ldw, c.n, c.k) : nullptr;
  if (c.pack && c.dtype == DType::f32 && c.n > 0 && c.k > 0)
    EXPECT_TRUE(packed) << c.name() << ": every path packs f32 weights";
  linear({.x = x.data(), .lda = lda, .w = w.data(), .w_dtype = c.dtype, .w_layout = c.layout,
          .ldw = ldw, .bias = c.bias ? bias.data() : nullptr, .y = y.data(), .ldy = ldy, .m = c.m,
          .n = c.n, .k = c.k, .packed = packed.get()});
  auto xr = x;
  if (rounds_x(c.dtype, c.m))
    for (float& v : xr) v = bf16_to_f32(f32_to_bf16(v));
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = c.bias ? bias[j] : 0.0, l1 = std::fabs(ref);
      for (int64_t p = 0; p < c.k; ++p) {
        const double wv = nk ? w.values[j * ldw + p] : w.values[p * ldw + j];
        ref += static_cast<double>(xr[i * lda + p]) * wv;
        l1 += std::fabs(static_cast<double>(xr[i * lda + p]) * wv);
      }
      const double got = y[i * ldy + j];
      if (!(std::fabs(got - ref) <= 1e-4 * std::fabs(ref) + 2e-6 * l1) && bad++ < 5)
        ADD_FAILURE() << c.name() << " y[" << i << "," << j << "] = " << got << ", want " << ref;
    }
    for (int64_t j = c.n; j < ldy; ++j)  // padding untouched
      if (y[i * ldy + j] != -7.f && bad++ < 5) ADD_FAILURE() << c.name() << " wrote padding";
  }
  EXPECT_EQ(bad, 0) << c.name();
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn}) {
      // decode shapes: every row count of a GEMV pass, odd widths and tails
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8})
        cases.push_back({m, 37, 53, d, l, m % 2 == 1});
      cases.push_back({1, 1, 1, d, l, true});
      cases.push_back({2, 300, 129, d, l, false, 3});
      cases.push_back({12, 9, 300, d, l, true});  // two GEMV passes? no: GEMM with k > KC
      // GEMM shapes: row tails (not multiples of 6), column tails, k blocks, n blocks
      cases.push_back({9, 16, 16, d, l, false});
      cases.push_back({13, 70, 300, d, l, true, 5});
      cases.push_back({64, 64, 64, d, l, false});
      cases.push_back({31, 200, 520, d, l, true});
      cases.push_back({20, 1100, 40, d, l, true});  // more than one column block
      cases.push_back({17, 33, 17, d, l, false, 0, 3});  // 3 threads: uneven splits
      cases.push_back({3, 70, 45, d, l, true, 1, 3});
      // more panels than threads but not a multiple of them: (panel, row slice) tiles, a row
      // slice left empty (m = 9 on 3 threads)
      cases.push_back({37, 576, 70, d, l, true, 0, 2});
      cases.push_back({9, 640, 33, d, l, false, 0, 3});
    }
  }
  cases.push_back({600, 40, 33, DType::bf16, WeightLayout::nk, true});  // more than one row block
  // bf16 pairs and 32-weight loads: odd k (a half pair), k below one vector, k one past a
  // 128-pair block, n below one vector and one past a panel, more than one column block
  for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn}) {
    for (int64_t m : {1, 3, 8, 9, 70}) {
      cases.push_back({m, 5, 7, DType::bf16, l, true});
      cases.push_back({m, 65, 31, DType::bf16, l, false, 1});
      cases.push_back({m, 17, 257, DType::bf16, l, true, 2});
      cases.push_back({m, 129, 33, DType::bf16, l, false, 0, 2});
    }
    cases.push_back({65, 1500, 700, DType::bf16, l, true, 3, 2});
  }
  // every f32 case again with W packed at load (the GEMM reads the panels, the GEMV the
  // checkpoint layout), and shapes whose thread splits start or end inside a panel
  const size_t plain = cases.size();
  for (size_t i = 0; i < plain; ++i)
    if (cases[i].dtype == DType::f32) {
      LinearCase c = cases[i];
      c.pack = true;
      cases.push_back(c);
    }
  for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn})
    for (int64_t m : {1, 4, 5, 8, 9, 40}) {
      cases.push_back({m, 81, 19, DType::f32, l, true, 0, 2, true});
      cases.push_back({m, 200, 130, DType::f32, l, false, 2, 3, true});
    }
  cases.push_back({7, 0, 5, DType::f32, WeightLayout::nk, true});
  cases.push_back({0, 5, 5, DType::f32, WeightLayout::nk, true});
  cases.push_back({3, 5, 0, DType::f32, WeightLayout::nk, true});
  cases.push_back({3, 5, 0, DType::f32, WeightLayout::kn, false});
  return cases;
}

class KernelsLinear : public ::testing::TestWithParam<Isa> {};

// Every CPU tuning table (tuning.h): each GEMV loop order on every path.
constexpr CpuVendor kTunings[] = {CpuVendor::intel, CpuVendor::amd};

TEST_P(KernelsLinear, MatchesDoubleReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (CpuVendor v : kTunings) {
    SCOPED_TRACE(vendor_name(v));
    ScopedCpuTuning tuning(tuning_for(v));
    uint32_t seed = 1;
    for (const LinearCase& c : linear_cases()) check_linear(c, seed += 3);
  }
}

TEST_P(KernelsLinear, DecodeSizedShapesOfTheDefaultModel) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (CpuVendor v : kTunings) {
    SCOPED_TRACE(vendor_name(v));
    ScopedCpuTuning tuning(tuning_for(v));
    // SmolLM2-135M: qkv 576 -> 960, gate|up 576 -> 3072, down 1536 -> 576
    check_linear({1, 960, 576, DType::bf16}, 11);
    check_linear({4, 576, 1536, DType::bf16, WeightLayout::nk, true}, 12);
    check_linear({1, 3072, 576, DType::f32, WeightLayout::kn}, 13);
    check_linear({1, 3072, 576, DType::f32}, 15);
    check_linear({2, 576, 1536, DType::f32, WeightLayout::nk, true}, 16);
    check_linear({40, 960, 576, DType::bf16}, 14);
  }
}

// The memory-order GEMV with every stream count (CpuTuning::gemv_streams): rows that do not split
// evenly into the streams, fewer rows than streams, k below a cache line and with a line's tail.
TEST_P(KernelsLinear, MemoryOrderStreams) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  for (int streams : {1, 2, 4, 8}) {
    SCOPED_TRACE(fmt::format("gemv_streams {}", streams));
    CpuTuning t = tuning_for(CpuVendor::amd);
    t.gemv_memory_order = true;
    t.gemv_streams = streams;
    ScopedCpuTuning tuning(t);
    uint32_t seed = 100;
    for (DType d : {DType::f32, DType::bf16, DType::f16})
      for (int64_t n : {1, 3, 8, 37, 130})
        for (int64_t k : {5, 16, 40, 576, 577}) check_linear({1, n, k, d, WeightLayout::nk, n % 2 == 1, k % 3}, seed += 3);
    check_linear({1, 333, 200, DType::bf16, WeightLayout::nk, true, 0, 3}, 7);  // 3 threads
  }
}

TEST_P(KernelsLinear, RejectsInconsistentArguments) {
  FUSELM_REQUIRE_ISA(GetParam());
  float x[4] = {}, w[4] = {}, y[4] = {};
  EXPECT_THROW(linear({.x = x, .lda = 1, .w = w, .y = y, .m = 2, .n = 2, .k = 2}),
               std::invalid_argument);
  EXPECT_THROW(linear({.x = x, .w = w, .ldw = 1, .y = y, .m = 2, .n = 2, .k = 2}),
               std::invalid_argument);
  EXPECT_THROW(linear({.x = x, .w = nullptr, .y = y, .m = 2, .n = 2, .k = 2}),
               std::invalid_argument);
  EXPECT_THROW(linear({.x = x, .w = w, .y = y, .m = -1, .n = 2, .k = 2}), std::invalid_argument);
}

TEST_P(KernelsLinear, RunsSeriallyInsideAParallelRegion) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  const auto x = random_floats(4 * 64, 5);
  const auto w = random_weights(64 * 64, DType::bf16, 6);
  std::vector<float> want(4 * 64), got(2 * 4 * 64);
  linear({.x = x.data(), .w = w.data(), .w_dtype = DType::bf16, .y = want.data(), .m = 4, .n = 64, .k = 64});
#pragma omp parallel for num_threads(2)
  for (int r = 0; r < 2; ++r)
    linear({.x = x.data(), .w = w.data(), .w_dtype = DType::bf16, .y = got.data() + r * 256,
            .m = 4, .n = 64, .k = 64});
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(got[i], want[i]);
    EXPECT_EQ(got[256 + i], want[i]);
  }
}

// The fast bf16 paths against the plain one: avx512bf16 and amx on x equals generic on bf16(x) up to fp32
// summation order (|d| <= 1e-5·(|ref| + sum |x·w|)), decode and prefill shapes, both layouts.
class KernelsLinearBf16 : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsLinearBf16, MatchesThePlainPathOnRoundedActivations) {
  FUSELM_REQUIRE_ISA(GetParam());
  for (CpuVendor v : kTunings)
  for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn}) {
    SCOPED_TRACE(vendor_name(v));
    ScopedCpuTuning tuning(tuning_for(v));
    for (int64_t m : {1, 2, 7, 8, 13, 64, 200}) {
      const int64_t n = 333, k = 577;
      const auto x = random_floats(static_cast<size_t>(m * k), 40 + m);
      const auto w = random_weights(static_cast<size_t>(n * k), DType::bf16, 41);
      const auto bias = random_floats(static_cast<size_t>(n), 42);
      auto xr = x;
      for (float& v : xr) v = bf16_to_f32(f32_to_bf16(v));
      std::vector<float> fast(m * n), plain(m * n);
      const int64_t ldw = l == WeightLayout::nk ? k : n;
      {
        ScopedCpuIsa isa(GetParam());
        if (!rounds_x(DType::bf16, m)) continue;  // amx's GEMV: the double-reference test covers it
        linear({.x = x.data(), .w = w.data(), .w_dtype = DType::bf16, .w_layout = l, .ldw = ldw,
                .bias = bias.data(), .y = fast.data(), .m = m, .n = n, .k = k});
      }
      {
        ScopedCpuIsa isa(Isa::generic);
        linear({.x = xr.data(), .w = w.data(), .w_dtype = DType::bf16, .w_layout = l, .ldw = ldw,
                .bias = bias.data(), .y = plain.data(), .m = m, .n = n, .k = k});
      }
      int bad = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double l1 = std::fabs(bias[j]);
          for (int64_t p = 0; p < k; ++p)
            l1 += std::fabs(double{xr[i * k + p]} *
                            w.values[l == WeightLayout::nk ? j * k + p : p * n + j]);
          const double d = std::fabs(double{fast[i * n + j]} - plain[i * n + j]);
          if (!(d <= 1e-5 * (std::fabs(plain[i * n + j]) + l1)) && bad++ < 5)
            ADD_FAILURE() << "m" << m << " y[" << i << "," << j << "] = " << fast[i * n + j]
                          << ", plain " << plain[i * n + j];
        }
      EXPECT_EQ(bad, 0) << "m " << m;
    }
  }
}

// Weights packed once give the same bits as packing per call: GEMM shapes with n not a multiple
// of a panel, odd k, past a 1024-column block, on 1 and 2 threads; and GEMV shapes, where the
// packed copy is not read (or, for [k, n] on avx512bf16, only from whole panels).
TEST_P(KernelsLinearBf16, PackedAtLoadEqualsPackedPerCall) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  struct Shape { int64_t m, n, k; };
  for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn})
    for (const Shape s : {Shape{9, 70, 33}, Shape{64, 1100, 129}, Shape{33, 200, 1}, Shape{1, 130, 65},
                          Shape{5, 300, 64}})
      for (int threads : {1, 2}) {
        testing::ScopedThreads t(threads);
        const int64_t ldw = l == WeightLayout::nk ? s.k : s.n;
        const auto x = random_floats(static_cast<size_t>(s.m * s.k), 50);
        const auto w = random_weights(static_cast<size_t>(s.n * s.k), DType::bf16, 51);
        const auto packed = PackedLinearWeights::pack(w.data(), DType::bf16, l, ldw, s.n, s.k);
        ASSERT_TRUE(packed);
        std::vector<float> a(s.m * s.n), b(s.m * s.n);
        LinearArgs args{.x = x.data(), .w = w.data(), .w_dtype = DType::bf16, .w_layout = l,
                        .ldw = ldw, .y = a.data(), .m = s.m, .n = s.n, .k = s.k};
        linear(args);
        args.y = b.data();
        args.packed = packed.get();
        linear(args);
        EXPECT_EQ(a, b) << "m" << s.m << " n" << s.n << " k" << s.k << " t" << threads;
      }
}

TEST(KernelsLinearPacked, OnlyPathsWithAPackedLayoutPack) {
  const auto w = random_weights(64 * 64, DType::bf16, 52);
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    if (!cpu_supports(isa)) continue;
    ScopedCpuIsa scoped(isa);
    EXPECT_FALSE(PackedLinearWeights::pack(w.data(), DType::bf16, WeightLayout::nk, 64, 64, 64));
  }
  if (cpu_supports(Isa::avx512bf16)) {
    ScopedCpuIsa scoped(Isa::avx512bf16);
    EXPECT_FALSE(PackedLinearWeights::pack(w.data(), DType::f16, WeightLayout::nk, 64, 64, 64));
    const auto p = PackedLinearWeights::pack(w.data(), DType::bf16, WeightLayout::nk, 64, 64, 64);
    ASSERT_TRUE(p);
    const float x[64] = {};
    float y[2 * 32];
    EXPECT_THROW(linear({.x = x, .w = w.data(), .w_dtype = DType::bf16, .y = y, .m = 2, .n = 32, .k = 32,
                         .packed = p.get()}),
                 std::invalid_argument);
  }
}

// f32 weights packed at load give the GEMM the very panels it packs per call: the same bits, on
// every path, at shapes with a partial panel, odd k, k past a k block, more than one column block
// and row block; GEMV shapes (m <= 8) ignore the packed copy.
TEST_P(KernelsLinear, F32PackedAtLoadEqualsPackedPerCall) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  struct Shape { int64_t m, n, k; };
  for (WeightLayout l : {WeightLayout::nk, WeightLayout::kn})
    for (const Shape s : {Shape{9, 70, 33}, Shape{64, 1100, 129}, Shape{33, 200, 1}, Shape{500, 90, 300},
                          Shape{13, 17, 5}, Shape{1, 130, 65}, Shape{8, 300, 64}})
      for (int threads : {1, 2, 3}) {
        testing::ScopedThreads t(threads);
        const int64_t ldw = l == WeightLayout::nk ? s.k : s.n;
        const auto x = random_floats(static_cast<size_t>(s.m * s.k), 60);
        const auto w = random_weights(static_cast<size_t>(s.n * s.k), DType::f32, 61);
        const auto bias = random_floats(static_cast<size_t>(s.n), 62);
        const auto packed = PackedLinearWeights::pack(w.data(), DType::f32, l, ldw, s.n, s.k);
        ASSERT_TRUE(packed);
        EXPECT_EQ(packed->dtype(), DType::f32);
        std::vector<float> a(s.m * s.n), b(s.m * s.n);
        LinearArgs args{.x = x.data(), .w = w.data(), .w_dtype = DType::f32, .w_layout = l,
                        .ldw = ldw, .bias = bias.data(), .y = a.data(), .m = s.m, .n = s.n, .k = s.k};
        linear(args);
        args.y = b.data();
        args.packed = packed.get();
        linear(args);
        EXPECT_EQ(a, b) << "m" << s.m << " n" << s.n << " k" << s.k << " t" << threads;
      }
}

TEST(KernelsLinearPacked, F32PanelsOfAnotherPathAreIgnored) {
  if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "needs avx2";
  const int64_t m = 20, n = 70, k = 33;
  const auto x = random_floats(m * k, 63);
  const auto w = random_weights(n * k, DType::f32, 64);
  std::unique_ptr<PackedLinearWeights> packed;
  {
    ScopedCpuIsa scoped(cpu_supports(Isa::avx512) ? Isa::avx512 : Isa::avx2);
    packed = PackedLinearWeights::pack(w.data(), DType::f32, WeightLayout::nk, k, n, k);
  }
  ASSERT_TRUE(packed);
  ScopedCpuIsa scoped(Isa::generic);  // panels of 4 columns: 16- or 64-column panels are not its
  for (int64_t rows : {int64_t{1}, m}) {
    std::vector<float> a(rows * n), b(rows * n);
    LinearArgs args{.x = x.data(), .w = w.data(), .y = a.data(), .m = rows, .n = n, .k = k};
    linear(args);
    args.y = b.data();
    args.packed = packed.get();
    linear(args);
    EXPECT_EQ(a, b) << "m" << rows;
  }
  const auto bf = random_weights(n * k, DType::bf16, 65);
  EXPECT_THROW(linear({.x = x.data(), .w = bf.data(), .w_dtype = DType::bf16, .y = std::vector<float>(m * n).data(),
                       .m = m, .n = n, .k = k, .packed = packed.get()}),
               std::invalid_argument);  // packed from f32, the weights are bf16
}

INSTANTIATE_TEST_SUITE_P(, KernelsLinearBf16, ::testing::Values(Isa::avx512bf16, Isa::amx),
                         testing::isa_param_name);

INSTANTIATE_TEST_SUITE_P(, KernelsLinear, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

// ---------------------------------------------------------------------------------------------

class KernelsMatmulBatched : public ::testing::TestWithParam<Isa> {};

// Checks C = A·B for the given (possibly broadcast) strides; A, B values at their addressed spots.
void check_matmul(const MatmulBatchedArgs& a, size_t a_size, size_t b_size, size_t c_size,
                  const std::string& name) {
  auto av = random_floats(a_size, 21), bv = random_floats(b_size, 22);
  std::vector<float> c(c_size, -3.f);
  MatmulBatchedArgs args = a;
  args.a = av.data();
  args.b = bv.data();
  args.c = c.data();
  matmul_batched(args);
  int64_t batches = 1;
  for (int d = 0; d < a.batch_dims; ++d) batches *= a.batch[d];
  int bad = 0;
  for (int64_t flat = 0; flat < batches; ++flat) {
    int64_t oa = 0, ob = 0, oc = 0, f = flat;
    for (int d = a.batch_dims - 1; d >= 0; --d) {
      const int64_t i = f % a.batch[d];
      f /= a.batch[d];
      oa += i * a.a_batch_strides[d];
      ob += i * a.b_batch_strides[d];
      oc += i * a.c_batch_strides[d];
    }
    for (int64_t i = 0; i < a.m; ++i)
      for (int64_t j = 0; j < a.n; ++j) {
        double ref = 0, l1 = 0;
        for (int64_t p = 0; p < a.k; ++p) {
          const double t = static_cast<double>(av[oa + i * a.a_row_stride + p * a.a_col_stride]) *
                           bv[ob + p * a.b_row_stride + j * a.b_col_stride];
          ref += t;
          l1 += std::fabs(t);
        }
        const double got = c[oc + i * a.c_row_stride + j * a.c_col_stride];
        if (!(std::fabs(got - ref) <= 1e-4 * std::fabs(ref) + 2e-6 * l1) && bad++ < 5)
          ADD_FAILURE() << name << " batch " << flat << " C[" << i << "," << j << "] = " << got
                        << ", want " << ref;
      }
  }
  EXPECT_EQ(bad, 0) << name;
}

TEST_P(KernelsMatmulBatched, MatchesDoubleReference) {
  FUSELM_REQUIRE_ISA(GetParam());
  ScopedCpuIsa isa(GetParam());
  {  // plain bmm [3, 5, 7] @ [3, 7, 9]
    MatmulBatchedArgs a{.m = 5, .n = 9, .k = 7, .batch_dims = 1, .batch = {3}};
    a.a_batch_strides[0] = 35, a.a_row_stride = 7, a.a_col_stride = 1;
    a.b_batch_strides[0] = 63, a.b_row_stride = 9, a.b_col_stride = 1;
    a.c_batch_strides[0] = 45, a.c_row_stride = 9, a.c_col_stride = 1;
    check_matmul(a, 105, 189, 135, "bmm");
  }
  {  // q @ k^T over [2, 4] batch dims, k^T as a transposed view ([.., n, k] storage)
    MatmulBatchedArgs a{.m = 6, .n = 11, .k = 16, .batch_dims = 2, .batch = {2, 4}};
    a.a_batch_strides[0] = 4 * 96, a.a_batch_strides[1] = 96, a.a_row_stride = 16, a.a_col_stride = 1;
    a.b_batch_strides[0] = 4 * 176, a.b_batch_strides[1] = 176, a.b_row_stride = 1, a.b_col_stride = 16;
    a.c_batch_strides[0] = 4 * 66, a.c_batch_strides[1] = 66, a.c_row_stride = 11, a.c_col_stride = 1;
    check_matmul(a, 8 * 96, 8 * 176, 8 * 66, "q_kT");
  }
  {  // rope: inv_freq[None, :, None] @ positions[:, None, :] with a broadcast batch stride
    MatmulBatchedArgs a{.m = 32, .n = 300, .k = 1, .batch_dims = 1, .batch = {2}};
    a.a_batch_strides[0] = 0, a.a_row_stride = 1, a.a_col_stride = 1;
    a.b_batch_strides[0] = 300, a.b_row_stride = 300, a.b_col_stride = 1;
    a.c_batch_strides[0] = 9600, a.c_row_stride = 300, a.c_col_stride = 1;
    check_matmul(a, 32, 600, 19200, "rope");
  }
  {  // odd strides everywhere (the simple loop), transposed output
    MatmulBatchedArgs a{.m = 4, .n = 5, .k = 6, .batch_dims = 1, .batch = {2}};
    a.a_batch_strides[0] = 1, a.a_row_stride = 2, a.a_col_stride = 9;
    a.b_batch_strides[0] = 100, a.b_row_stride = 3, a.b_col_stride = 20;
    a.c_batch_strides[0] = 20, a.c_row_stride = 1, a.c_col_stride = 4;
    check_matmul(a, 2 + 8 + 46, 100 + 15 + 80 + 1, 40, "strided");
  }
  {  // many small products (parallel over batches), no batch dims at all
    MatmulBatchedArgs a{.m = 40, .n = 24, .k = 64, .batch_dims = 1, .batch = {64}};
    a.a_batch_strides[0] = 2560, a.a_row_stride = 64, a.a_col_stride = 1;
    a.b_batch_strides[0] = 1536, a.b_row_stride = 24, a.b_col_stride = 1;
    a.c_batch_strides[0] = 960, a.c_row_stride = 24, a.c_col_stride = 1;
    check_matmul(a, 64 * 2560, 64 * 1536, 64 * 960, "many");
    MatmulBatchedArgs b{.m = 3, .n = 2, .k = 4};
    b.a_row_stride = 4, b.a_col_stride = 1, b.b_row_stride = 2, b.b_col_stride = 1;
    b.c_row_stride = 2, b.c_col_stride = 1;
    check_matmul(b, 12, 8, 6, "unbatched");
  }
}

INSTANTIATE_TEST_SUITE_P(, KernelsMatmulBatched, ::testing::ValuesIn(testing::all_isas()),
                         testing::isa_param_name);

}  // namespace kernels_linear_test
}  // namespace fuselm::kernels
