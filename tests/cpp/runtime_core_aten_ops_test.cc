// Cases for core_aten_ops.cc, added to the op table of runtime_ops_test.cc: each runs the op in a
// hand-made graph (contiguous, transposed and strided inputs, broadcasting, 0-d and empty tensors,
// integer dtypes where the op takes them) and compares with plain loops written here from
// PyTorch's documented semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "runtime_test_util.h"

namespace fuselm::runtime::testing {
namespace runtime_core_aten_ops_test {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct Input {
  Host t;
  Layout layout = Layout::contiguous;
};

// One-op graph over `ins` (each through its layout); the output's meta is `want`'s.
void check(const std::string& op, const std::vector<Input>& ins,
           const std::function<std::vector<Arg>(const std::vector<int>&)>& args, const Host& want,
           const std::string& what, double rtol = 1e-6, double atol = 1e-7) {
  SCOPED_TRACE(op + ": " + what);
  try {
    OpGraph g;
    std::vector<int> n;
    for (const auto& in : ins) n.push_back(g.input(in.t, in.layout));
    g.output(g.op(op, args(n), want.dtype, want.shape));
    expect_close(g.run(), want, rtol, atol, what);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

// torch.clamp with optional bounds (has_lo/has_hi); a NaN input or bound gives NaN.
double clamp_ref(double x, double lo, double hi, bool has_lo = true, bool has_hi = true) {
  if (std::isnan(x)) return x;
  if (has_lo) x = (std::isnan(lo) || x < lo) ? lo : x;
  if (has_hi) x = (std::isnan(hi) || x > hi) ? hi : x;
  return x;
}

void clamp_scalar_case() {
  const std::string op = "aten.clamp.default";
  Host x = rand_host(DType::f32, {2, 3, 4}, 1, -3, 3);
  x.v[5] = kNan;
  auto clip = [](double lo, double hi) { return [lo, hi](double v) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); }; };
  check(op, {{x, Layout::transposed}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(-1.0), F(1.5)}; },
        map_host(x, DType::f32, clip(-1.0, 1.5)), "both bounds, NaN kept");
  check(op, {{x, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), None(), F(0.5)}; },
        map_host(x, DType::f32, [](double v) { return std::isnan(v) ? v : std::min(v, 0.5); }), "max only");
  check(op, {{x}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(0.0), None()}; },
        map_host(x, DType::f32, [](double v) { return std::isnan(v) ? v : std::max(v, 0.0); }), "min only");
  Host i = rand_host(DType::i64, {7}, 2, -9, 9);
  check(op, {{i}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(-2), I(3)}; },
        map_host(i, DType::i64, clip(-2, 3)), "i64");
  Host z = make_host(DType::f32, {}, {4.0});
  check(op, {{z}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(-1.0), F(1.0)}; }, make_host(DType::f32, {}, {1.0}), "0-d");
  Host e{DType::f32, {0, 3}, {}};
  check(op, {{e}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(-1.0), F(1.0)}; }, e, "empty");
}

void clamp_tensor_case() {
  const std::string op = "aten.clamp.Tensor";
  Host x = rand_host(DType::f32, {3, 4}, 3, -3, 3);
  Host lo = rand_host(DType::f32, {4}, 4, -2, 0);
  lo.v[2] = kNan;  // a NaN bound gives NaN
  Host hi = rand_host(DType::f32, {3, 1}, 5, 0, 2);
  Host want{DType::f32, {3, 4}, std::vector<double>(12)};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c)
      want.v[r * 4 + c] = as_dtype(DType::f32, clamp_ref(at(x, {r, c}), at(lo, {c}), at(hi, {r, 0})));
  check(op, {{x, Layout::transposed}, {lo}, {hi, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2])}; },
        want, "bounds broadcast");
  Host wlo = zip_host(x, lo, DType::f32, [](double v, double l) { return clamp_ref(v, l, 0, true, false); });
  check(op, {{x}, {lo}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), None()}; }, wlo, "min only");
  // A bound that broadcasts x to a bigger shape makes the output bigger.
  Host x1 = rand_host(DType::f32, {4}, 6, -3, 3), hi2 = rand_host(DType::f32, {2, 4}, 7, 0, 1);
  check(op, {{x1}, {hi2}}, [](auto n) { return std::vector<Arg>{R(n[0]), None(), R(n[1])}; },
        zip_host(x1, hi2, DType::f32, [](double v, double h) { return clamp_ref(v, 0, h, false, true); }), "output broadcast");
}

void clamp_in_place_case() {
  Host x = rand_host(DType::f32, {2, 3, 4}, 8, -3, 3);
  OpGraph g;
  int xn = g.input(x);
  int base = g.op("aten.clone.default", {R(xn), None()}, DType::f32, {2, 3, 4});
  g.op("aten.clamp_.default", {R(base), F(-1.0), F(1.0)}, DType::f32, {2, 3, 4});
  g.output(g.op("aten.neg.default", {R(base)}, DType::f32, {2, 3, 4}));  // reads the mutated base
  expect_close(g.run(), map_host(x, DType::f32, [](double v) { return -std::min(std::max(v, -1.0), 1.0); }), 1e-6, 1e-7,
               "clamp_ writes its input");
}

void unary_case(const std::string& op, const std::function<double(double)>& f, std::vector<Arg> extra = {}) {
  auto args = [extra](const std::vector<int>& n) {
    std::vector<Arg> a{R(n[0])};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Host a = rand_host(DType::f32, {3, 17}, 11, -30, 30);
  check(op, {{a}}, args, map_host(a, DType::f32, f), "f32 wide range", 2e-6, 1e-6);
  Host b = rand_host(DType::f32, {2, 3, 4}, 12, -2, 2);
  check(op, {{b, Layout::transposed}}, args, map_host(b, DType::f32, f), "transposed", 2e-6, 1e-6);
  check(op, {{b, Layout::strided}}, args, map_host(b, DType::f32, f), "strided", 2e-6, 1e-6);
  Host c = make_host(DType::f32, {}, {0.75});
  check(op, {{c}}, args, map_host(c, DType::f32, f), "0-d", 2e-6, 1e-6);
  Host e{DType::f32, {2, 0}, {}};
  check(op, {{e}}, args, e, "empty");
}

void minmax_case(const std::string& op, bool is_max) {
  auto f = [is_max](double x, double y) {
    if (std::isnan(x) || std::isnan(y)) return kNan;
    return is_max ? std::max(x, y) : std::min(x, y);
  };
  auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1])}; };
  Host a = rand_host(DType::f32, {2, 3, 4}, 21), b = rand_host(DType::f32, {4}, 22);
  a.v[3] = kNan;
  b.v[1] = kNan;
  check(op, {{a, Layout::transposed}, {b}}, args, zip_host(a, b, DType::f32, f), "broadcast, NaN from either side");
  Host i = rand_host(DType::i64, {3, 5}, 23, -9, 9), j = rand_host(DType::i64, {3, 5}, 24, -9, 9);
  check(op, {{i, Layout::strided}, {j}}, args, zip_host(i, j, DType::i64, f), "i64");
}

void pow_scalar_case() {
  const std::string op = "aten.pow.Scalar";
  Host e = rand_host(DType::f32, {2, 3, 4}, 31, -3, 3);
  for (double base : {2.0, 10000.0, 0.5}) {
    check(op, {{e, Layout::transposed}}, [base](auto n) { return std::vector<Arg>{F(base), R(n[0])}; },
          map_host(e, DType::f32, [base](double y) { return std::pow(base, y); }), "base " + std::to_string(base), 2e-6, 1e-7);
  }
  Host i = rand_host(DType::i64, {6}, 32, 0, 6);
  check(op, {{i}}, [](auto n) { return std::vector<Arg>{I(3), R(n[0])}; },
        map_host(i, DType::i64, [](double y) { return std::pow(3.0, y); }), "i64");
}

void stack_case() {
  const std::string op = "aten.stack.default";
  Host a = rand_host(DType::f32, {2, 3}, 41), b = rand_host(DType::f32, {2, 3}, 42);
  auto ref = [&](int d) {
    std::vector<int64_t> shape = {2, 3};
    shape.insert(shape.begin() + d, 2);
    Host r{DType::f32, shape, std::vector<double>(12)};
    for (int64_t i = 0; i < 12; ++i) {
      auto idx = unravel(i, shape);
      const int64_t which = idx[d];
      idx.erase(idx.begin() + d);
      r.v[i] = at(which ? b : a, idx);
    }
    return r;
  };
  for (int d : {0, 1, 2}) {
    check(op, {{a, Layout::transposed}, {b, Layout::strided}},
          [d](auto n) { return std::vector<Arg>{L({R(n[0]), R(n[1])}), I(d == 2 ? -1 : d)}; }, ref(d), "dim " + std::to_string(d));
  }
  Host s = make_host(DType::i64, {}, {5}), t = make_host(DType::i64, {}, {-2});
  check(op, {{s}, {t}}, [](auto n) { return std::vector<Arg>{L({R(n[0]), R(n[1])})}; }, make_host(DType::i64, {2}, {5, -2}), "0-d i64");
}

void repeat_interleave_case() {
  const std::string op = "aten.repeat_interleave.self_int";
  Host x = rand_host(DType::f32, {2, 3, 4}, 51);
  for (int d : {0, 1, -1}) {
    std::vector<int64_t> shape = x.shape;
    const int dd = d < 0 ? d + 3 : d;
    shape[dd] *= 2;
    Host want{DType::f32, shape, std::vector<double>(48)};
    for (int64_t i = 0; i < 48; ++i) {
      auto idx = unravel(i, shape);
      idx[dd] /= 2;
      want.v[i] = at(x, idx);
    }
    check(op, {{x, Layout::transposed}}, [d](auto n) { return std::vector<Arg>{R(n[0]), I(2), I(d), None()}; }, want,
          "dim " + std::to_string(d));
  }
  Host y = rand_host(DType::i64, {2, 2}, 52, -9, 9);
  Host flat{DType::i64, {12}, std::vector<double>(12)};
  for (int64_t i = 0; i < 12; ++i) flat.v[i] = y.v[i / 3];
  check(op, {{y, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(3), None(), None()}; }, flat, "no dim: flattened");
  check(op, {{y}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(0), I(0), None()}; }, Host{DType::i64, {0, 2}, {}}, "0 repeats");
}

void concat_case() {
  Host a = rand_host(DType::f32, {2, 3}, 61), b = rand_host(DType::f32, {2, 2}, 62);
  Host want{DType::f32, {2, 5}, std::vector<double>(10)};
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 5; ++c) want.v[r * 5 + c] = c < 3 ? at(a, {r, c}) : at(b, {r, c - 3});
  check("aten.concat.default", {{a, Layout::transposed}, {b}}, [](auto n) { return std::vector<Arg>{L({R(n[0]), R(n[1])}), I(-1)}; },
        want, "dim -1");
}

void index_select_case() {
  const std::string op = "aten.index_select.default";
  Host x = rand_host(DType::f32, {4, 3, 2}, 71);
  Host idx = make_host(DType::i64, {5}, {3, 0, 0, -1, 2});
  for (int d : {0, 1}) {
    Host id = d == 0 ? idx : make_host(DType::i64, {3}, {2, 2, 0});
    std::vector<int64_t> shape = x.shape;
    shape[d] = id.numel();
    Host want{DType::f32, shape, std::vector<double>(numel_of(shape))};
    for (int64_t i = 0; i < want.numel(); ++i) {
      auto p = unravel(i, shape);
      int64_t at_d = static_cast<int64_t>(id.v[p[d]]);
      p[d] = at_d < 0 ? at_d + x.shape[d] : at_d;
      want.v[i] = at(x, p);
    }
    check(op, {{x, Layout::transposed}, {id, Layout::strided}}, [d](auto n) { return std::vector<Arg>{R(n[0]), I(d), R(n[1])}; },
          want, "dim " + std::to_string(d));
  }
  Host e{DType::i64, {0}, {}};
  check(op, {{x}, {e}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(0), R(n[1])}; }, Host{DType::f32, {0, 3, 2}, {}}, "empty index");
}

}  // namespace runtime_core_aten_ops_test

void add_core_aten_cases(std::map<std::string, std::function<void()>>& m) {
  using namespace runtime_core_aten_ops_test;
  m["aten.clamp.default"] = clamp_scalar_case;
  m["aten.clamp.Tensor"] = clamp_tensor_case;
  m["aten.clamp_.default"] = clamp_in_place_case;
  m["aten.square.default"] = [] { unary_case("aten.square.default", [](double x) { return x * x; }); };
  m["aten.expm1.default"] = [] { unary_case("aten.expm1.default", [](double x) { return std::expm1(x); }); };
  m["aten.softplus.default"] = [] {
    unary_case("aten.softplus.default", [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, {I(1), I(20)});
    unary_case("aten.softplus.default", [](double x) { return 2 * x > 5 ? x : std::log1p(std::exp(2 * x)) / 2; }, {F(2.0), F(5.0)});
  };
  m["aten.min.other"] = [] { minmax_case("aten.min.other", false); };
  m["aten.max.other"] = [] { minmax_case("aten.max.other", true); };
  m["aten.pow.Scalar"] = pow_scalar_case;
  m["aten.stack.default"] = stack_case;
  m["aten.repeat_interleave.self_int"] = repeat_interleave_case;
  m["aten.concat.default"] = concat_case;
  m["aten.index_select.default"] = index_select_case;
}

}  // namespace fuselm::runtime::testing
