// The generic strided kernels of the ATen ops (kernels/cpu/{strided,copy,elementwise,reduce,
// embedding,topk}.h) on shapes large enough to split over the thread pool, against element-by-element
// references written here from the ATen definitions, at 1 and 4 threads (the rows of a split walk
// start mid-tensor, so a wrong start index shows).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/copy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/topk.h"
#include "kernels_testing.h"

namespace fuselm::kernels {
namespace kernels_strided_test {

Strided contiguous(void* data, DType dt, std::initializer_list<int64_t> shape) {
  Strided v;
  v.data = data;
  v.dtype = dt;
  v.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) v.shape[d++] = s;
  int64_t st = 1;
  for (d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = st;
    st *= v.shape[d];
  }
  return v;
}

class KernelsStrided : public ::testing::TestWithParam<int> {};

// a [B, M, N] read transposed from memory [B, N, M], b [M, 1] broadcast: out = a + 0.5 b and a > b.
TEST_P(KernelsStrided, BinaryBroadcastsStridedOperands) {
  testing::ScopedThreads threads(GetParam());
  const int64_t B = 64, M = 48, N = 40;
  std::vector<float> am = testing::random_floats(B * N * M, 1), bm = testing::random_floats(M, 2);
  Strided a = contiguous(am.data(), DType::f32, {B, N, M});
  std::swap(a.shape[1], a.shape[2]);
  std::swap(a.strides[1], a.strides[2]);
  Strided b = contiguous(bm.data(), DType::f32, {M, 1});
  std::vector<float> out(B * M * N), cmp(B * M * N);
  binary(BinaryFn::add, 0.5, a, b, contiguous(out.data(), DType::f32, {B, M, N}));
  binary(BinaryFn::gt, 1.0, a, b, contiguous(cmp.data(), DType::f32, {B, M, N}));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float x = am[(i * N + n) * M + m], y = bm[m];
        ASSERT_EQ(out[(i * M + m) * N + n], x + 0.5f * y) << i << " " << m << " " << n;
        ASSERT_EQ(cmp[(i * M + m) * N + n], x > y ? 1.f : 0.f);
      }
}

// Integer operands go through doubles: i64 positions minus an i64 scalar-like row, into i64.
TEST_P(KernelsStrided, BinaryIntegersThroughDoubles) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 300, C = 200;
  std::vector<int64_t> a(R * C), b(C), out(R * C);
  for (int64_t i = 0; i < R * C; ++i) a[i] = i * 7 - 5000;
  for (int64_t j = 0; j < C; ++j) b[j] = j * 3;
  binary(BinaryFn::div_floor, 1.0, contiguous(a.data(), DType::i64, {R, C}), contiguous(b.data(), DType::i64, {C}),
         contiguous(out.data(), DType::i64, {R, C}));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 1; j < C; ++j)
      ASSERT_EQ(out[i * C + j], static_cast<int64_t>(std::floor(static_cast<double>(a[i * C + j]) / b[j])));
}

TEST_P(KernelsStrided, WhereAndMaskedFillBroadcast) {
  testing::ScopedThreads threads(GetParam());
  const int64_t T = 256, S = 256;
  std::vector<uint8_t> mask(T * S);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) mask[i * S + j] = j > i;
  std::vector<float> x = testing::random_floats(T * S, 3), out(T * S), filled = x;
  double minus_inf = -INFINITY;
  Strided scalar;
  scalar.data = &minus_inf;
  scalar.dtype = DType::f64;
  where(contiguous(mask.data(), DType::boolean, {1, T, S}), scalar, contiguous(x.data(), DType::f32, {T, S}),
        contiguous(out.data(), DType::f32, {1, T, S}));
  masked_fill(contiguous(mask.data(), DType::boolean, {T, S}), -1.0, contiguous(filled.data(), DType::f32, {T, S}));
  for (int64_t i = 0; i < T * S; ++i) {
    ASSERT_EQ(out[i], mask[i] ? -INFINITY : x[i]) << i;
    ASSERT_EQ(filled[i], mask[i] ? -1.f : x[i]) << i;
  }
}

// Unary on a transposed f32 view (strided rows, computed in double as the generic path does);
// contiguous f32 with no vector kernel in float.
TEST_P(KernelsStrided, UnaryStridedAndContiguous) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 200, C = 300;
  std::vector<float> x = testing::random_floats(R * C, 4), out(R * C), flat(R * C);
  Strided xt = contiguous(x.data(), DType::f32, {C, R});
  std::swap(xt.shape[0], xt.shape[1]);
  std::swap(xt.strides[0], xt.strides[1]);
  unary(UnaryFn::sin, xt, contiguous(out.data(), DType::f32, {R, C}));
  unary(UnaryFn::rsqrt, contiguous(x.data(), DType::f32, {R, C}), contiguous(flat.data(), DType::f32, {R, C}));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      ASSERT_EQ(out[r * C + c], static_cast<float>(std::sin(static_cast<double>(x[c * R + r]))));
      const float v = x[r * C + c], want = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v)));
      ASSERT_TRUE(std::isnan(want) ? std::isnan(flat[r * C + c]) : flat[r * C + c] == want);
    }
}

TEST_P(KernelsStrided, CopyTransposesAndConverts) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 129, C = 257;
  std::vector<float> x = testing::random_floats(R * C, 5), y(R * C);
  std::vector<uint16_t> h(R * C);
  Strided xt = contiguous(x.data(), DType::f32, {C, R});
  std::swap(xt.shape[0], xt.shape[1]);
  std::swap(xt.strides[0], xt.strides[1]);
  copy_strided(xt, contiguous(y.data(), DType::f32, {R, C}));
  copy_strided(xt, contiguous(h.data(), DType::bf16, {R, C}));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      ASSERT_EQ(y[r * C + c], x[c * R + r]);
      ASSERT_EQ(h[r * C + c], f32_to_bf16(x[c * R + r]));
    }
  // Contiguous f32 <-> bf16 / f16 (convert_dtype), and a transposed bf16 / f16 view into f32 (the
  // row loop): the values the double path gives.
  std::vector<uint16_t> hb(R * C), hf(R * C), back16(R * C);
  std::vector<float> wide(R * C), from_view(R * C);
  copy_strided(contiguous(x.data(), DType::f32, {R, C}), contiguous(hb.data(), DType::bf16, {R, C}));
  copy_strided(contiguous(x.data(), DType::f32, {R, C}), contiguous(hf.data(), DType::f16, {R, C}));
  copy_strided(contiguous(hf.data(), DType::f16, {R, C}), contiguous(back16.data(), DType::bf16, {R, C}));
  copy_strided(contiguous(hb.data(), DType::bf16, {R, C}), contiguous(wide.data(), DType::f32, {R, C}));
  for (int64_t i = 0; i < R * C; ++i) {
    ASSERT_EQ(hb[i], f32_to_bf16(x[i]));
    ASSERT_EQ(hf[i], f32_to_f16(x[i]));
    ASSERT_EQ(back16[i], f32_to_bf16(f16_to_f32(hf[i])));
    ASSERT_EQ(wide[i], bf16_to_f32(hb[i]));
  }
  for (DType half : {DType::bf16, DType::f16}) {
    Strided ht = contiguous(half == DType::bf16 ? hb.data() : hf.data(), half, {C, R});  // read as [C, R]
    std::swap(ht.shape[0], ht.shape[1]);
    std::swap(ht.strides[0], ht.strides[1]);
    copy_strided(ht, contiguous(from_view.data(), DType::f32, {R, C}));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const uint16_t v = (half == DType::bf16 ? hb : hf)[c * R + r];
        ASSERT_EQ(from_view[r * C + c], half == DType::bf16 ? bf16_to_f32(v) : f16_to_f32(v));
      }
  }
  std::vector<int32_t> ints(R * C);
  fill(contiguous(ints.data(), DType::i32, {R, C}), 7.0);
  for (int32_t v : ints) ASSERT_EQ(v, 7);
}

TEST_P(KernelsStrided, ReductionsSoftmaxLayerNormPerRow) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 512, W = 96;
  std::vector<float> x = testing::random_floats(R * W, 6), mean(R), sm(R * W), ln(R * W);
  std::array<bool, kMaxStridedDims> red{};
  red[1] = true;
  reduce(ReduceFn::mean, contiguous(x.data(), DType::f32, {R, W}), red, contiguous(mean.data(), DType::f32, {R}));
  softmax(contiguous(x.data(), DType::f32, {R, W}), contiguous(sm.data(), DType::f32, {R, W}), 1);
  layer_norm(x.data(), nullptr, nullptr, ln.data(), R, W, 1e-5);
  for (int64_t r = 0; r < R; ++r) {
    double s = 0, mx = -INFINITY, z = 0, var = 0;
    for (int64_t k = 0; k < W; ++k) s += x[r * W + k], mx = std::max<double>(mx, x[r * W + k]);
    ASSERT_EQ(mean[r], static_cast<float>(s / W)) << r;
    for (int64_t k = 0; k < W; ++k) z += std::exp(x[r * W + k] - mx), var += (x[r * W + k] - s / W) * (x[r * W + k] - s / W);
    for (int64_t k = 0; k < W; ++k) {
      ASSERT_NEAR(sm[r * W + k], std::exp(x[r * W + k] - mx) / z, 1e-6);
      ASSERT_NEAR(ln[r * W + k], (x[r * W + k] - s / W) / std::sqrt(var / W + 1e-5), 1e-5);
    }
  }
}

TEST_P(KernelsStrided, EmbeddingRowsAndGather) {
  testing::ScopedThreads threads(GetParam());
  const int64_t V = 50, H = 640, n = 300;
  std::vector<float> table = testing::random_floats(V * H, 7), out(n * H);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 13) % (V + 10);  // some past the slice
  EmbeddingArgs a;
  a.table = table.data();
  a.rows = V;
  a.width = H;
  a.ids = ids.data();
  a.n = n;
  a.out = out.data();
  EXPECT_EQ(embedding_lookup(a), 4);  // ids[4] = 52 is outside a table of 50
  a.masked = true;
  EXPECT_EQ(embedding_lookup(a), -1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < H; ++k) ASSERT_EQ(out[i * H + k], ids[i] < V ? table[ids[i] * H + k] : 0.f);
  std::vector<float> rows(n * H);
  const std::vector<int64_t> pick = {3, 0, 299, 150};
  gather_rows(out.data(), H * sizeof(float), pick.data(), 4, rows.data());
  for (size_t r = 0; r < pick.size(); ++r)
    for (int64_t k = 0; k < H; ++k) ASSERT_EQ(rows[r * H + k], out[pick[r] * H + k]);
}

// topk along dim 0 of [W, L] (lines strided by L) and max.dim along dim 1, with ties and a NaN.
TEST_P(KernelsStrided, TopkAndMaxPerLine) {
  testing::ScopedThreads threads(GetParam());
  const int64_t W = 64, L = 600, K = 5;
  std::vector<float> x(W * L);
  for (int64_t i = 0; i < W * L; ++i) x[i] = static_cast<float>((i * 7919) % 97);  // many ties
  x[3 * L + 10] = NAN;
  std::vector<float> vals(K * L), mv(W);
  std::vector<int64_t> idx(K * L), mi(W);
  topk(contiguous(x.data(), DType::f32, {W, L}), 0, K, true, contiguous(vals.data(), DType::f32, {K, L}),
       contiguous(idx.data(), DType::i64, {K, L}));
  max_dim(contiguous(x.data(), DType::f32, {W, L}), 1, contiguous(mv.data(), DType::f32, {W}),
          contiguous(mi.data(), DType::i64, {W}));
  for (int64_t l = 0; l < L; ++l) {
    std::vector<int64_t> order(W);
    for (int64_t j = 0; j < W; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const float va = x[a * L + l], vb = x[b * L + l];
      return std::isnan(va) ? !std::isnan(vb) : (!std::isnan(vb) && va > vb);
    });
    for (int64_t j = 0; j < K; ++j) ASSERT_EQ(idx[j * L + l], order[j]) << l << " " << j;
  }
  for (int64_t r = 0; r < W; ++r) {
    int64_t best = 0;
    for (int64_t j = 1; j < L; ++j)
      if (std::isnan(x[r * L + j]) || (!std::isnan(x[r * L + best]) && x[r * L + j] > x[r * L + best])) {
        if (std::isnan(x[r * L + best])) break;
        best = j;
      }
    ASSERT_EQ(mi[r], best) << r;
  }
}

// gather/scatter along dim 1 of x [R, C] by an index [R, K] read transposed, an index past the
// end refused by name; x -= y in place through a transposed view with y [C] broadcast.
TEST_P(KernelsStrided, IndexAlongAndInPlace) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 37, C = 9, K = 4;
  std::vector<float> x = testing::random_floats(R * C, 5), y = testing::random_floats(C, 6);
  std::vector<int64_t> im(K * R);  // memory [K, R]: index[r, k] = im[k * R + r]
  for (int64_t i = 0; i < K * R; ++i) im[i] = (i * 7) % C - (i % 3 == 0 ? C : 0);  // negatives wrap
  Strided xv = contiguous(x.data(), DType::f32, {R, C});
  Strided iv = contiguous(im.data(), DType::i64, {K, R});
  std::swap(iv.shape[0], iv.shape[1]);
  std::swap(iv.strides[0], iv.strides[1]);
  ASSERT_EQ(check_index_along(xv, 1, iv), "");
  std::vector<float> g(R * K);
  gather_along(xv, 1, iv, contiguous(g.data(), DType::f32, {R, K}));
  auto at = [&](int64_t r, int64_t k) {
    const int64_t v = im[k * R + r];
    return v < 0 ? v + C : v;
  };
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) ASSERT_EQ(g[r * K + k], x[r * C + at(r, k)]) << r << " " << k;
  std::vector<float> s = x;
  scatter_along(contiguous(s.data(), DType::f32, {R, C}), 1, iv, -2.5);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      bool hit = false;
      for (int64_t k = 0; k < K; ++k) hit = hit || at(r, k) == c;
      ASSERT_EQ(s[r * C + c], hit ? -2.5f : x[r * C + c]) << r << " " << c;
    }
  im[5] = C;
  EXPECT_EQ(check_index_along(xv, 1, iv), "index 9 is out of bounds for dimension 1 of size 9");
  std::vector<float> t = x;  // memory [C, R] viewed as [R, C]
  Strided tv = contiguous(t.data(), DType::f32, {C, R});
  std::swap(tv.shape[0], tv.shape[1]);
  std::swap(tv.strides[0], tv.strides[1]);
  binary_in_place(BinaryFn::add, -1.0, tv, contiguous(y.data(), DType::f32, {C}));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < R; ++r) ASSERT_EQ(t[c * R + r], static_cast<float>(double(x[c * R + r]) - y[c])) << r << " " << c;
  EXPECT_THROW(binary_in_place(BinaryFn::pow, 1.0, tv, tv), std::invalid_argument);
}

// The split RMS statistic: row sums of squares, then the scale, as fuselm.rms_norm on whole rows.
TEST_P(KernelsStrided, RowSumSquaresAndRmsScale) {
  testing::ScopedThreads threads(GetParam());
  const int64_t R = 300, W = 96;
  std::vector<float> x = testing::random_floats(R * W, 7), w = testing::random_floats(W, 8), sums(R), out(R * W);
  row_sum_squares(x.data(), R, W, sums.data());
  rms_scale_rows(x.data(), R, W, sums.data(), 2 * W, 1e-6f, w.data(), 1.0f, out.data());
  for (int64_t r = 0; r < R; ++r) {
    double acc = 0;
    for (int64_t j = 0; j < W; ++j) acc += double(x[r * W + j]) * x[r * W + j];
    ASSERT_EQ(sums[r], static_cast<float>(acc)) << r;
    const float inv = 1.0f / std::sqrt(sums[r] / static_cast<float>(2 * W) + 1e-6f);
    for (int64_t j = 0; j < W; ++j) ASSERT_EQ(out[r * W + j], x[r * W + j] * inv * (w[j] + 1.0f)) << r << " " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, KernelsStrided, ::testing::Values(1, 4));

}  // namespace kernels_strided_test
}  // namespace fuselm::kernels
