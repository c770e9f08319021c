// Step-invariant values (ir/invariant_nodes.h): computed from parameters alone when the executor
// is built and kept, so a later change of the parameter's memory does not reach the output; a value an
// in-place op writes (directly or through a view) is recomputed every run. The oracle is the
// arithmetic written out here, on two runs with different inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ir/invariant_nodes.h"
#include "runtime_test_util.h"

namespace fuselm::runtime::testing {
namespace {

Host run_with(Executor& ex, const Host& x) {
  Storage st = encode(x);
  std::vector<Tensor> in = {st.tensor()};
  return read(ex.run(in, {}));
}

Host elementwise(const Host& a, const std::function<double(int64_t)>& f) {
  Host out{DType::f32, a.shape, std::vector<double>(a.numel())};
  for (int64_t i = 0; i < a.numel(); ++i) out.v[i] = as_dtype(DType::f32, f(i));
  return out;
}

TEST(InvariantNodes, ParameterOnlyValuesAreComputedOnceAndKept) {
  OpGraph g;
  Host p = rand_host(DType::f32, {4}, 501, -1.0, 1.0);
  int x = g.input(rand_host(DType::f32, {4}, 502));
  int w = g.param(p);
  int e = g.op("aten.exp.default", {R(w)}, DType::f32, {4});
  int a = g.op("aten.neg.default", {R(e)}, DType::f32, {4});
  g.output(g.op("aten.add.Tensor", {R(x), R(a), I(1)}, DType::f32, {4}));
  auto params = g.params();
  Executor ex(g.graph(), params, {});
  EXPECT_EQ(ex.invariant_count(), 2u);  // exp and neg
  for (uint32_t seed : {503u, 504u}) {
    Host xin = rand_host(DType::f32, {4}, seed);
    Host want = elementwise(xin, [&](int64_t i) { return xin.v[i] - std::exp(static_cast<float>(p.v[i])); });
    expect_close(run_with(ex, xin), want, 1e-6, 1e-6, "seed " + std::to_string(seed));
    // Kept, not recomputed: the next run ignores what the parameter's memory holds now.
    std::memset(params.begin()->second.data, 0, 4 * sizeof(float));
  }
}

// How the in-place add reaches the clone: itself, a view, or a slice whose end is the token count
// (not invariant itself, yet aliasing the clone).
enum class Target { direct, view, symbolic_slice };

TEST(InvariantNodes, AValueWrittenInPlaceIsRecomputedEveryRun) {
  for (Target how : {Target::direct, Target::view, Target::symbolic_slice}) {
    OpGraph g;
    Host p = rand_host(DType::f32, {4}, 511);
    int x = g.input(rand_host(DType::f32, {4}, 512), Layout::contiguous, {"s0"});
    int w = g.param(p);
    int z = g.op("aten.clone.default", {R(w), None()}, DType::f32, {4});
    int target = z, xs = x;
    std::vector<int64_t> shape{4};
    if (how == Target::view) {
      target = g.op("aten.view.default", {R(z), Ints({2, 2})}, DType::f32, {2, 2});
      xs = g.op("aten.view.default", {R(x), Ints({2, 2})}, DType::f32, {2, 2});
      shape = {2, 2};
    } else if (how == Target::symbolic_slice) {
      target = g.op("aten.slice.Tensor", {R(z), I(0), I(0), Sym("s0"), I(1)}, DType::f32, {4});
    }
    g.op("aten.add_.Tensor", {R(target), R(xs)}, DType::f32, shape);
    g.output(g.op("aten.mul.Scalar", {R(z), F(1.0)}, DType::f32, {4}));
    Executor ex(g.graph(), g.params(), {});
    EXPECT_EQ(ex.invariant_count(), 0u);
    for (uint32_t seed : {513u, 514u}) {  // a kept clone would carry the first run's write
      Host xin = rand_host(DType::f32, {4}, seed);
      Host want = elementwise(xin, [&](int64_t i) { return p.v[i] + xin.v[i]; });
      expect_close(run_with(ex, xin), want, 1e-6, 1e-6, "target kind " + std::to_string(static_cast<int>(how)));
    }
  }
}

TEST(InvariantNodes, SymbolicSizesInputsEngineOpsAndOutputsAreNot) {
  OpGraph g;
  int x = g.input(rand_host(DType::f32, {1, 3, 4}, 521), Layout::contiguous, {"", "s0", ""});
  int w = g.param(rand_host(DType::f32, {4}, 522));
  int by_tokens = g.op("aten.mul.Scalar", {R(w), Sym("s0")}, DType::f32, {4});
  int cast = g.op("aten.mul.Scalar", {R(w), F(2.0)}, DType::f32, {4});
  int norm = g.op("fuselm.rms_norm.default", {R(x), R(cast), F(1e-6)}, DType::f32, {1, 3, 4});
  int out = g.op("aten.add.Tensor", {R(norm), R(by_tokens), I(1)}, DType::f32, {1, 3, 4});
  int last = g.op("aten.mul.Scalar", {R(w), F(3.0)}, DType::f32, {4});
  g.graph().outputs = {out, last};
  const auto inv = ir::invariant_nodes(g.graph());
  EXPECT_FALSE(inv[x]);
  EXPECT_TRUE(inv[w]);
  EXPECT_FALSE(inv[by_tokens]);  // reads the token count
  EXPECT_TRUE(inv[cast]);
  EXPECT_FALSE(inv[norm]);  // an engine op (and reads an input)
  EXPECT_FALSE(inv[last]);  // a graph output: handed out, and dropped, every run
}

}  // namespace
}  // namespace fuselm::runtime::testing
