// Every op of OpRegistry::builtin() against an independent double-precision reference: each case
// builds a tiny graph by hand (inputs, a strided view of them where it matters, the op), runs it
// through runtime::Executor and compares with plain loops written here. Shapes broadcast, dims
// are negative, inputs are transposed or sliced views, and integer/bool dtypes are used where the
// op takes them. Also: unknown ops at Executor construction, the symbolic shape evaluator, the
// buffer pool, and fuselm.attention over a paged KV cache with two and three sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels_testing.h"
#include "kv/paged_kv_cache.h"
#include "runtime/buffer_pool.h"
#include "runtime/executor.h"
#include "runtime/op_registry.h"
#include "runtime/sym_expr.h"
#include "runtime_test_util.h"

namespace fuselm::runtime {
namespace runtime_ops_test {

using namespace fuselm::runtime::testing;  // NOLINT
using ir::DType;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// ---------------------------------------------------------------------------------------------
// One-op graphs.

struct In {
  Host t;
  Layout layout = Layout::contiguous;
};
using ArgsFn = std::function<std::vector<Arg>(const std::vector<int>&)>;

/// Builds inputs -> op, runs it, and returns the output.
Host run_op(const std::string& op, const std::vector<In>& ins, const ArgsFn& args, DType dtype,
            const std::vector<int64_t>& shape, bool* contiguous = nullptr) {
  OpGraph g;
  std::vector<int> nodes;
  for (const auto& in : ins) nodes.push_back(g.input(in.t, in.layout));
  g.output(g.op(op, args(nodes), dtype, shape));
  Host out = g.run();
  if (contiguous) *contiguous = g.last_output_contiguous();
  return out;
}

/// run_op compared with `want` (its dtype and shape are also the node's output meta).
void check_op(const std::string& op, const std::vector<In>& ins, const ArgsFn& args, const Host& want,
              const std::string& what, double rtol = 1e-5, double atol = 1e-6) {
  SCOPED_TRACE(op + ": " + what);
  Host got;
  try {
    got = run_op(op, ins, args, want.dtype, want.shape);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
    return;
  }
  expect_close(got, want, rtol, atol);
}

/// The error message running the graph throws (fails when it throws none).
std::string run_error(const std::string& op, const std::vector<In>& ins, const ArgsFn& args, DType dtype,
                      const std::vector<int64_t>& shape) {
  try {
    run_op(op, ins, args, dtype, shape);
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << op << " did not fail";
  return {};
}

/// Small integers in [lo, hi] stored as dtype d (comparisons need ties, bit ops need ints).
Host grid(DType d, std::vector<int64_t> shape, uint32_t seed, int lo = -2, int hi = 2) {
  Host h = rand_host(DType::i64, std::move(shape), seed, lo, hi);
  h.dtype = d;
  for (auto& x : h.v) x = as_dtype(d, x);
  return h;
}

/// Floats bounded away from zero: |x| in [0.5, 2], random sign.
Host nonzero(DType d, std::vector<int64_t> shape, uint32_t seed) {
  Host h = rand_host(d, std::move(shape), seed, 0.5, 2.0);
  std::mt19937 rng(seed * 7 + 1);
  for (auto& x : h.v)
    if (rng() & 1u) x = -x;
  return h;
}

Host scalar_host(DType d, double x) { return make_host(d, {}, {x}); }

// ---------------------------------------------------------------------------------------------
// Reference view helpers (index maps, written from PyTorch's documented semantics).

Host permute_ref(const Host& x, const std::vector<int>& perm) {
  Host r{x.dtype, {}, {}};
  for (int p : perm) r.shape.push_back(x.shape[p]);
  r.v.resize(x.numel());
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, r.shape);
    std::vector<int64_t> src(x.shape.size());
    for (size_t k = 0; k < perm.size(); ++k) src[perm[k]] = idx[k];
    r.v[i] = at(x, src);
  }
  return r;
}

Host transpose_ref(const Host& x, int a, int b) {
  std::vector<int> perm(x.shape.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::swap(perm[a], perm[b]);
  return permute_ref(x, perm);
}

/// Elements first, first+step, ... (count of them) along dim.
Host slice_ref(const Host& x, int dim, int64_t first, int64_t count, int64_t step = 1) {
  Host r{x.dtype, x.shape, {}};
  r.shape[dim] = count;
  r.v.resize(r.numel());
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, r.shape);
    idx[dim] = first + idx[dim] * step;
    r.v[i] = at(x, idx);
  }
  return r;
}

Host select_ref(const Host& x, int dim, int64_t index) {
  Host s = slice_ref(x, dim, index, 1);
  s.shape.erase(s.shape.begin() + dim);
  return s;
}

Host reshape_ref(const Host& x, std::vector<int64_t> shape) {
  Host r = x;
  r.shape = std::move(shape);
  EXPECT_EQ(r.numel(), x.numel());
  return r;
}

Host expand_ref(const Host& x, std::vector<int64_t> shape) {
  Host r{x.dtype, std::move(shape), {}};
  r.v.resize(r.numel());
  for (int64_t i = 0; i < r.numel(); ++i) r.v[i] = at_broadcast(x, unravel(i, r.shape));
  return r;
}

Host cast_ref(const Host& x, DType d) { return map_host(x, d, [](double v) { return v; }); }

// ---------------------------------------------------------------------------------------------
// The case table: op name -> a function that checks it. Every registered op needs one.

using Cases = std::map<std::string, std::function<void()>>;

// ---- elementwise binary ---------------------------------------------------------------------

enum class BinKind { arith, cmp, div };

struct BinSpec {
  std::string base;  // "add", "eq", ...
  BinKind kind;
  std::function<double(double, double)> f;
  bool alpha = false;  // schema has alpha (add/sub)
};

DType bin_out(const BinSpec& s, DType promoted) {
  if (s.kind == BinKind::cmp) return DType::boolean;
  if (s.kind == BinKind::div) return is_float(promoted) ? promoted : DType::f32;
  return promoted;
}

Host bin_operand(const BinSpec& s, DType d, std::vector<int64_t> shape, uint32_t seed, bool rhs) {
  if (s.kind == BinKind::cmp) return grid(d, std::move(shape), seed);
  if (rhs && s.kind == BinKind::div) return is_float(d) ? nonzero(d, std::move(shape), seed) : grid(d, std::move(shape), seed, 1, 4);
  return is_float(d) ? rand_host(d, std::move(shape), seed) : grid(d, std::move(shape), seed, -9, 9);
}

void check_binary_tensor(const BinSpec& s, const std::string& op) {
  auto args = [&](Arg alpha) {
    return [&s, alpha](const std::vector<int>& n) {
      std::vector<Arg> a{R(n[0]), R(n[1])};
      if (s.alpha) a.push_back(alpha);
      return a;
    };
  };
  auto f1 = [&](double x, double y) { return s.f(x, y); };
  {  // transposed lhs, rhs broadcast from [3, 1]
    Host a = bin_operand(s, DType::f32, {2, 3, 4}, 1, false), b = bin_operand(s, DType::f32, {3, 1}, 2, true);
    check_op(op, {{a, Layout::transposed}, {b}}, args(I(1)), zip_host(a, b, bin_out(s, DType::f32), f1), "f32 transposed x [3,1]");
  }
  {  // lhs broadcast from the left, rhs a strided view
    Host a = bin_operand(s, DType::f32, {5}, 3, false), b = bin_operand(s, DType::f32, {4, 5}, 4, true);
    check_op(op, {{a}, {b, Layout::strided}}, args(I(1)), zip_host(a, b, bin_out(s, DType::f32), f1), "f32 [5] x strided [4,5]");
  }
  {  // contiguous same shape (the tight loop)
    Host a = bin_operand(s, DType::f32, {3, 8}, 5, false), b = bin_operand(s, DType::f32, {3, 8}, 6, true);
    check_op(op, {{a}, {b}}, args(I(1)), zip_host(a, b, bin_out(s, DType::f32), f1), "f32 contiguous");
  }
  {  // 0-d tensor on either side
    Host a = bin_operand(s, DType::f32, {}, 7, false), b = bin_operand(s, DType::f32, {6}, 8, true);
    check_op(op, {{a}, {b}}, args(I(1)), zip_host(a, b, bin_out(s, DType::f32), f1), "0-d x [6]");
    Host c = bin_operand(s, DType::f32, {2, 3}, 9, false), d = bin_operand(s, DType::f32, {}, 10, true);
    check_op(op, {{c, Layout::transposed}, {d}}, args(I(1)), zip_host(c, d, bin_out(s, DType::f32), f1), "[2,3] x 0-d");
    Host e = bin_operand(s, DType::f32, {}, 11, false), g = bin_operand(s, DType::f32, {}, 12, true);
    check_op(op, {{e}, {g}}, args(I(1)), zip_host(e, g, bin_out(s, DType::f32), f1), "0-d x 0-d");
  }
  {  // integers
    Host a = bin_operand(s, DType::i64, {3, 4}, 13, false), b = bin_operand(s, DType::i64, {4}, 14, true);
    check_op(op, {{a, Layout::strided}, {b}}, args(I(1)), zip_host(a, b, bin_out(s, DType::i64), f1), "i64 strided x [4]");
  }
  {  // type promotion i64 x f32 -> f32
    Host a = bin_operand(s, DType::i64, {2, 3}, 15, false), b = bin_operand(s, DType::f32, {3}, 16, true);
    check_op(op, {{a}, {b}}, args(I(1)), zip_host(a, b, bin_out(s, DType::f32), f1), "i64 x f32");
  }
  if (s.kind == BinKind::cmp) {  // bool operands
    Host a = rand_host(DType::boolean, {2, 5}, 17), b = rand_host(DType::boolean, {5}, 18);
    check_op(op, {{a, Layout::transposed}, {b}}, args(I(1)), zip_host(a, b, DType::boolean, f1), "bool");
  }
  if (s.alpha) {  // alpha scales the other operand
    Host a = rand_host(DType::f32, {2, 3, 4}, 19), b = rand_host(DType::f32, {4}, 20);
    check_op(op, {{a, Layout::transposed}, {b}}, args(F(2.5)), zip_host(a, b, DType::f32, [&](double x, double y) { return s.f(x, 2.5 * y); }), "alpha 2.5");
    Host c = grid(DType::i64, {3, 4}, 21, -9, 9), d = grid(DType::i64, {3, 4}, 22, -9, 9);
    check_op(op, {{c}, {d}}, args(I(3)), zip_host(c, d, DType::i64, [&](double x, double y) { return s.f(x, 3 * y); }), "i64 alpha 3");
  }
}

void check_binary_scalar(const BinSpec& s, const std::string& op) {
  auto args = [&](Arg other, Arg alpha) {
    return [&s, other, alpha](const std::vector<int>& n) {
      std::vector<Arg> a{R(n[0]), other};
      if (s.alpha) a.push_back(alpha);
      return a;
    };
  };
  const double fs = s.kind == BinKind::cmp ? 1.0 : 0.75;
  auto with = [&](double y) { return [&s, y](double x) { return s.f(x, y); }; };
  {
    Host a = bin_operand(s, DType::f32, {2, 3, 4}, 31, false);
    check_op(op, {{a, Layout::transposed}}, args(F(fs), I(1)), map_host(a, bin_out(s, DType::f32), with(fs)), "f32 transposed, real scalar");
  }
  {
    Host a = bin_operand(s, DType::f32, {3, 5}, 32, false);
    check_op(op, {{a}}, args(I(2), I(1)), map_host(a, bin_out(s, DType::f32), with(2)), "f32 contiguous, int scalar");
  }
  {
    Host a = bin_operand(s, DType::f32, {}, 33, false);
    check_op(op, {{a}}, args(F(1.5), I(1)), map_host(a, bin_out(s, DType::f32), with(1.5)), "0-d f32, real scalar");
  }
  {
    Host a = bin_operand(s, DType::i64, {3, 4}, 34, false);
    check_op(op, {{a, Layout::strided}}, args(I(2), I(1)), map_host(a, bin_out(s, DType::i64), with(2)), "i64 strided, int scalar");
    check_op(op, {{a}}, args(F(0.5), I(1)), map_host(a, bin_out(s, DType::f32), with(0.5)), "i64, real scalar -> f32");
  }
  if (s.alpha) {
    Host a = rand_host(DType::f32, {4, 3}, 35);
    check_op(op, {{a, Layout::transposed}}, args(F(0.75), F(-2.0)), map_host(a, DType::f32, [&](double x) { return s.f(x, -2.0 * 0.75); }), "alpha -2");
  }
}

void add_binary_cases(Cases& m) {
  std::vector<BinSpec> specs = {
      {"add", BinKind::arith, [](double x, double y) { return x + y; }, true},
      {"sub", BinKind::arith, [](double x, double y) { return x - y; }, true},
      {"mul", BinKind::arith, [](double x, double y) { return x * y; }},
      {"div", BinKind::div, [](double x, double y) { return x / y; }},
      {"eq", BinKind::cmp, [](double x, double y) { return double(x == y); }},
      {"ne", BinKind::cmp, [](double x, double y) { return double(x != y); }},
      {"lt", BinKind::cmp, [](double x, double y) { return double(x < y); }},
      {"le", BinKind::cmp, [](double x, double y) { return double(x <= y); }},
      {"gt", BinKind::cmp, [](double x, double y) { return double(x > y); }},
      {"ge", BinKind::cmp, [](double x, double y) { return double(x >= y); }},
  };
  for (const auto& s : specs) {
    m["aten." + s.base + ".Tensor"] = [s] { check_binary_tensor(s, "aten." + s.base + ".Tensor"); };
    m["aten." + s.base + ".Scalar"] = [s] { check_binary_scalar(s, "aten." + s.base + ".Scalar"); };
  }
  BinSpec mx{"maximum", BinKind::arith, [](double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); }};
  BinSpec mn{"minimum", BinKind::arith, [](double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y); }};
  for (const auto& s : {mx, mn}) {
    const std::string op = "aten." + s.base + ".default";
    m[op] = [s, op] {
      check_binary_tensor(s, op);
      // NaN propagates (PyTorch's maximum/minimum, unlike max/min of C).
      Host a = make_host(DType::f32, {4}, {NAN, 1.0, 2.0, NAN}), b = make_host(DType::f32, {4}, {1.0, NAN, 3.0, NAN});
      check_op(op, {{a}, {b}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1])}; }, zip_host(a, b, DType::f32, s.f), "NaN");
    };
  }

  m["aten.rsub.Scalar"] = [] {  // other - alpha * self
    const std::string op = "aten.rsub.Scalar";
    Host a = rand_host(DType::f32, {2, 3, 4}, 41);
    check_op(op, {{a, Layout::transposed}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(1.5), I(1)}; },
             map_host(a, DType::f32, [](double x) { return 1.5 - x; }), "f32");
    check_op(op, {{a}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(1.5), F(2.0)}; },
             map_host(a, DType::f32, [](double x) { return 1.5 - 2.0 * x; }), "alpha 2");
    Host b = grid(DType::i64, {5}, 42, -9, 9);
    check_op(op, {{b, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(1), I(1)}; },
             map_host(b, DType::i64, [](double x) { return 1 - x; }), "i64 (1 - mask)");
    Host c = scalar_host(DType::f32, 0.25);
    check_op(op, {{c}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(1.0), I(1)}; }, scalar_host(DType::f32, 0.75), "0-d");
  };

  m["aten.div.Tensor_mode"] = [] {
    const std::string op = "aten.div.Tensor_mode";
    auto args = [](Arg mode) { return [mode](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1]), mode}; }; };
    Host a = rand_host(DType::f32, {2, 3, 4}, 51, -5, 5), b = nonzero(DType::f32, {4}, 52);
    check_op(op, {{a, Layout::transposed}, {b}}, args(S("floor")), zip_host(a, b, DType::f32, [](double x, double y) { return std::floor(x / y); }), "f32 floor");
    check_op(op, {{a}, {b, Layout::strided}}, args(S("trunc")), zip_host(a, b, DType::f32, [](double x, double y) { return std::trunc(x / y); }), "f32 trunc");
    check_op(op, {{a}, {b}}, args(None()), zip_host(a, b, DType::f32, [](double x, double y) { return x / y; }), "f32 true");
    Host c = grid(DType::i64, {3, 5}, 53, -20, 20), d = make_host(DType::i64, {5}, {3, -3, 4, -7, 2});
    check_op(op, {{c, Layout::strided}, {d}}, args(S("floor")), zip_host(c, d, DType::i64, [](double x, double y) { return std::floor(x / y); }), "i64 floor");
    check_op(op, {{c}, {d}}, args(S("trunc")), zip_host(c, d, DType::i64, [](double x, double y) { return std::trunc(x / y); }), "i64 trunc");
    check_op(op, {{c}, {d}}, args(None()), zip_host(c, d, DType::f32, [](double x, double y) { return x / y; }), "i64 true -> f32");
  };

  m["aten.pow.Tensor_Scalar"] = [] {
    const std::string op = "aten.pow.Tensor_Scalar";
    Host a = rand_host(DType::f32, {2, 3, 4}, 61, 0.25, 2.0);
    for (double e : {2.0, 3.0, 0.5, -1.5}) {
      check_op(op, {{a, Layout::transposed}}, [e](auto n) { return std::vector<Arg>{R(n[0]), F(e)}; },
               map_host(a, DType::f32, [e](double x) { return std::pow(x, e); }), "f32 ^ " + std::to_string(e));
    }
    Host neg = rand_host(DType::f32, {7}, 62, -2, 2);
    check_op(op, {{neg, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(2)}; },
             map_host(neg, DType::f32, [](double x) { return x * x; }), "f32 ^ int 2");
    check_op(op, {{neg}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(3)}; },
             map_host(neg, DType::f32, [](double x) { return x * x * x; }), "f32 ^ int 3");
    Host i = grid(DType::i64, {6}, 63, -5, 5);
    check_op(op, {{i}}, [](auto n) { return std::vector<Arg>{R(n[0]), I(3)}; },
             map_host(i, DType::i64, [](double x) { return x * x * x; }), "i64 ^ 3");
  };
  m["aten.pow.Tensor_Tensor"] = [] {
    const std::string op = "aten.pow.Tensor_Tensor";
    Host a = rand_host(DType::f32, {2, 3}, 64, 0.25, 2.0), b = rand_host(DType::f32, {3}, 65, -2, 2);
    check_op(op, {{a, Layout::transposed}, {b}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1])}; },
             zip_host(a, b, DType::f32, [](double x, double y) { return std::pow(x, y); }), "f32");
    Host c = scalar_host(DType::f32, 2.0);
    check_op(op, {{c}, {b, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1])}; },
             zip_host(c, b, DType::f32, [](double x, double y) { return std::pow(x, y); }), "0-d base");
  };

  auto bitwise = [](const std::string& op, std::function<int64_t(int64_t, int64_t)> f, bool logical_only) {
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1])}; };
    auto fd = [f](double x, double y) { return static_cast<double>(f(static_cast<int64_t>(x), static_cast<int64_t>(y))); };
    Host a = rand_host(DType::boolean, {3, 4}, 71), b = rand_host(DType::boolean, {4}, 72);
    check_op(op, {{a, Layout::transposed}, {b}}, args, zip_host(a, b, DType::boolean, fd), "bool");
    check_op(op, {{a}, {b, Layout::strided}}, args, zip_host(a, b, DType::boolean, fd), "bool strided");
    if (logical_only) {  // logical_and of numbers: nonzero is true
      Host c = grid(DType::f32, {2, 5}, 73), d = grid(DType::i64, {5}, 74);
      check_op(op, {{c}, {d}}, args, zip_host(c, d, DType::boolean, [](double x, double y) { return double(x != 0 && y != 0); }), "f32 x i64");
    } else {  // bitwise on integers
      Host c = grid(DType::i64, {2, 5}, 75, 0, 15), d = grid(DType::i64, {5}, 76, 0, 15);
      check_op(op, {{c, Layout::transposed}, {d}}, args, zip_host(c, d, DType::i64, fd), "i64");
      Host e = grid(DType::i64, {4}, 77, -8, 7), g = grid(DType::i64, {4}, 78, -8, 7);
      check_op(op, {{e}, {g}}, args, zip_host(e, g, DType::i64, fd), "i64 negative");
    }
  };
  m["aten.bitwise_and.Tensor"] = [bitwise] { bitwise("aten.bitwise_and.Tensor", [](int64_t x, int64_t y) { return x & y; }, false); };
  m["aten.bitwise_or.Tensor"] = [bitwise] { bitwise("aten.bitwise_or.Tensor", [](int64_t x, int64_t y) { return x | y; }, false); };
  m["aten.logical_and.default"] = [bitwise] { bitwise("aten.logical_and.default", [](int64_t x, int64_t y) { return int64_t(x && y); }, true); };

  m["aten.where.self"] = [] {
    const std::string op = "aten.where.self";
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2])}; };
    auto ref = [](const Host& c, const Host& a, const Host& b, DType d) {
      Host ab{d, broadcast(a.shape, b.shape), {}};
      Host r{d, broadcast(c.shape, ab.shape), {}};
      r.v.resize(r.numel());
      for (int64_t i = 0; i < r.numel(); ++i) {
        auto idx = unravel(i, r.shape);
        r.v[i] = as_dtype(d, at_broadcast(c, idx) != 0 ? at_broadcast(a, idx) : at_broadcast(b, idx));
      }
      return r;
    };
    Host c = rand_host(DType::boolean, {3, 4}, 81), a = rand_host(DType::f32, {2, 3, 4}, 82), b = rand_host(DType::f32, {4}, 83);
    check_op(op, {{c, Layout::strided}, {a, Layout::transposed}, {b}}, args, ref(c, a, b, DType::f32), "f32");
    Host c2 = rand_host(DType::boolean, {2, 1, 5}, 84), a2 = scalar_host(DType::f32, -kInf), b2 = rand_host(DType::f32, {3, 5}, 85);
    check_op(op, {{c2}, {a2}, {b2}}, args, ref(c2, a2, b2, DType::f32), "0-d -inf, cond broadcasts to a bigger shape");
    Host c3 = rand_host(DType::boolean, {2, 1}, 86), a3 = grid(DType::i64, {2, 3}, 87, -9, 9), b3 = scalar_host(DType::i64, 0);
    check_op(op, {{c3}, {a3, Layout::transposed}, {b3}}, args, ref(c3, a3, b3, DType::i64), "i64");
    Host a4 = rand_host(DType::boolean, {4}, 88), b4 = rand_host(DType::boolean, {4}, 89);
    check_op(op, {{rand_host(DType::boolean, {4}, 90)}, {a4}, {b4}}, args,
             ref(rand_host(DType::boolean, {4}, 90), a4, b4, DType::boolean), "bool");
  };

  m["aten.masked_fill.Scalar"] = [] {
    const std::string op = "aten.masked_fill.Scalar";
    auto ref = [](const Host& x, const Host& mask, double v) {
      Host r = x;
      for (int64_t i = 0; i < r.numel(); ++i)
        if (at_broadcast(mask, unravel(i, r.shape)) != 0) r.v[i] = as_dtype(x.dtype, v);
      return r;
    };
    Host x = rand_host(DType::f32, {2, 3, 4}, 91), mask = rand_host(DType::boolean, {3, 4}, 92);
    check_op(op, {{x, Layout::transposed}, {mask, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), F(-kInf)}; },
             ref(x, mask, -kInf), "f32 -inf");
    Host xi = grid(DType::i64, {3, 4}, 93, -9, 9), mi = rand_host(DType::boolean, {4}, 94);
    check_op(op, {{xi, Layout::strided}, {mi}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), I(-7)}; }, ref(xi, mi, -7), "i64");
    Host xb = rand_host(DType::boolean, {2, 3}, 95), mb = rand_host(DType::boolean, {2, 1}, 96);
    check_op(op, {{xb}, {mb}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), B(true)}; }, ref(xb, mb, 1), "bool");
  };
}

// ---- elementwise unary ----------------------------------------------------------------------

enum class Domain { any, positive, nonzero, unit };  // unit: inside (-1, 1)

struct UnSpec {
  std::string op;
  std::function<double(double)> f;
  Domain domain = Domain::any;
  bool keeps_int = false;   // integer input keeps its dtype (neg, abs, floor, relu); else -> f32
  bool int_ok = true;       // op accepts integer input at all
  std::vector<Arg> extra{};  // trailing schema args
};

Host un_operand(const UnSpec& s, DType d, std::vector<int64_t> shape, uint32_t seed) {
  if (!is_float(d)) return grid(d, std::move(shape), seed, s.domain == Domain::any ? -9 : 1, 9);
  if (s.domain == Domain::positive) return rand_host(d, std::move(shape), seed, 0.05, 4.0);
  if (s.domain == Domain::nonzero) return nonzero(d, std::move(shape), seed);
  if (s.domain == Domain::unit) return rand_host(d, std::move(shape), seed, -0.99, 0.99);
  return rand_host(d, std::move(shape), seed, -4.0, 4.0);
}

void check_unary(const UnSpec& s) {
  auto args = [&s](const std::vector<int>& n) {
    std::vector<Arg> a{R(n[0])};
    a.insert(a.end(), s.extra.begin(), s.extra.end());
    return a;
  };
  const double rtol = 2e-6, atol = 1e-6;
  Host a = un_operand(s, DType::f32, {3, 17}, 101);
  check_op(s.op, {{a}}, args, map_host(a, DType::f32, s.f), "f32 contiguous", rtol, atol);
  Host b = un_operand(s, DType::f32, {2, 3, 4}, 102);
  check_op(s.op, {{b, Layout::transposed}}, args, map_host(b, DType::f32, s.f), "f32 transposed", rtol, atol);
  check_op(s.op, {{b, Layout::strided}}, args, map_host(b, DType::f32, s.f), "f32 strided", rtol, atol);
  Host c = un_operand(s, DType::f32, {}, 103);
  check_op(s.op, {{c}}, args, map_host(c, DType::f32, s.f), "0-d", rtol, atol);
  if (s.int_ok) {
    Host i = un_operand(s, DType::i64, {2, 5}, 104);
    check_op(s.op, {{i, Layout::transposed}}, args, map_host(i, s.keeps_int ? DType::i64 : DType::f32, s.f), "i64", rtol, atol);
  }
}

double erf_ref(double x) { return std::erf(x); }
// erfinv by bisection on std::erf (independent of the kernel's approximation and Newton steps).
double erfinv_ref(double y) {
  double lo = -6.0, hi = 6.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}
double gelu_ref(double x) { return 0.5 * x * (1.0 + erf_ref(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

void add_unary_cases(Cases& m) {
  std::vector<UnSpec> specs = {
      {"aten.neg.default", [](double x) { return -x; }, Domain::any, true},
      {"aten.abs.default", [](double x) { return std::fabs(x); }, Domain::any, true},
      {"aten.rsqrt.default", [](double x) { return 1.0 / std::sqrt(x); }, Domain::positive},
      {"aten.sqrt.default", [](double x) { return std::sqrt(x); }, Domain::positive},
      {"aten.reciprocal.default", [](double x) { return 1.0 / x; }, Domain::nonzero},
      {"aten.exp.default", [](double x) { return std::exp(x); }},
      {"aten.log.default", [](double x) { return std::log(x); }, Domain::positive},
      {"aten.sin.default", [](double x) { return std::sin(x); }},
      {"aten.cos.default", [](double x) { return std::cos(x); }},
      {"aten.erf.default", erf_ref},
      {"aten.erfinv.default", erfinv_ref, Domain::unit, false, false},
      {"aten.floor.default", [](double x) { return std::floor(x); }, Domain::any, true},
      {"aten.tanh.default", [](double x) { return std::tanh(x); }},
      {"aten.sigmoid.default", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"aten.silu.default", [](double x) { return x / (1.0 + std::exp(-x)); }, Domain::any, false, false},
      {"aten.relu.default", [](double x) { return x > 0 ? x : 0.0; }, Domain::any, true},
  };
  for (const auto& s : specs) m[s.op] = [s] { check_unary(s); };
  m["aten.gelu.default"] = [] {
    check_unary({"aten.gelu.default", gelu_ref, Domain::any, false, false, {S("none")}});
    check_unary({"aten.gelu.default", gelu_tanh_ref, Domain::any, false, false, {S("tanh")}});
  };
  m["aten.logical_not.default"] = [] {
    const std::string op = "aten.logical_not.default";
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0])}; };
    auto f = [](double x) { return double(x == 0); };
    Host a = rand_host(DType::boolean, {3, 4}, 111);
    check_op(op, {{a, Layout::transposed}}, args, map_host(a, DType::boolean, f), "bool");
    Host b = grid(DType::f32, {2, 6}, 112);
    check_op(op, {{b}}, args, map_host(b, DType::boolean, f), "f32");
    Host c = grid(DType::i64, {7}, 113);
    check_op(op, {{c, Layout::strided}}, args, map_host(c, DType::boolean, f), "i64");
  };
  m["aten.bitwise_not.default"] = [] {
    const std::string op = "aten.bitwise_not.default";
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0])}; };
    Host a = rand_host(DType::boolean, {3, 4}, 114);
    check_op(op, {{a, Layout::transposed}}, args, map_host(a, DType::boolean, [](double x) { return double(x == 0); }), "bool");
    Host c = grid(DType::i64, {2, 7}, 115, -9, 9);
    check_op(op, {{c, Layout::strided}}, args, map_host(c, DType::i64, [](double x) { return double(~static_cast<int64_t>(x)); }), "i64");
  };
}

// ---- reductions -----------------------------------------------------------------------------

/// Reduces x over `dims` (all when empty) with acc/fin, keepdim or not.
Host reduce_ref(const Host& x, std::vector<int> dims, bool keep, DType out, double init,
                const std::function<double(double, double)>& acc, const std::function<double(double, int64_t)>& fin) {
  std::vector<bool> red(x.shape.size(), dims.empty());
  for (int d : dims) red[d < 0 ? d + x.ndim() : d] = true;
  std::vector<int64_t> kshape;  // keepdim shape
  int64_t count = 1;
  for (int d = 0; d < x.ndim(); ++d) {
    kshape.push_back(red[d] ? 1 : x.shape[d]);
    if (red[d]) count *= x.shape[d];
  }
  Host r{out, kshape, std::vector<double>(numel_of(kshape), init)};
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.shape);
    for (int d = 0; d < x.ndim(); ++d)
      if (red[d]) idx[d] = 0;
    auto& a = r.v[ravel(idx, kshape)];
    a = acc(a, x.v[i]);
  }
  for (auto& v : r.v) v = as_dtype(out, fin(v, count));
  if (!keep) {
    std::vector<int64_t> s;
    for (int d = 0; d < x.ndim(); ++d)
      if (!red[d]) s.push_back(x.shape[d]);
    r.shape = s;
  }
  return r;
}

void check_reduction(const std::string& op, double init, std::function<double(double, double)> acc,
                     std::function<double(double, int64_t)> fin, bool int_ok) {
  auto args = [](Arg dims, bool keep, bool with_dtype) {
    return [dims, keep, with_dtype](const std::vector<int>& n) {
      std::vector<Arg> a{R(n[0]), dims, B(keep)};
      if (with_dtype) a.push_back(None());
      return a;
    };
  };
  const bool dt = op != "aten.amax.default";  // mean/sum carry a dtype argument
  const double rtol = 1e-5, atol = 1e-6;
  Host x = rand_host(DType::f32, {2, 3, 4}, 121);
  check_op(op, {{x}}, args(Ints({-1}), false, dt), reduce_ref(x, {-1}, false, DType::f32, init, acc, fin), "last dim", rtol, atol);
  check_op(op, {{x}}, args(Ints({1, 2}), true, dt), reduce_ref(x, {1, 2}, true, DType::f32, init, acc, fin), "trailing dims keepdim", rtol, atol);
  check_op(op, {{x}}, args(Ints({1}), false, dt), reduce_ref(x, {1}, false, DType::f32, init, acc, fin), "middle dim", rtol, atol);
  check_op(op, {{x, Layout::transposed}}, args(Ints({0, -1}), true, dt), reduce_ref(x, {0, -1}, true, DType::f32, init, acc, fin), "transposed, dims 0,-1 keepdim", rtol, atol);
  check_op(op, {{x, Layout::strided}}, args(Ints({-1}), false, dt), reduce_ref(x, {-1}, false, DType::f32, init, acc, fin), "strided last dim", rtol, atol);
  check_op(op, {{x}}, args(dt ? None() : Ints({}), false, dt), reduce_ref(x, {}, false, DType::f32, init, acc, fin), "all dims", rtol, atol);
  if (int_ok) {
    Host i = grid(DType::i64, {3, 5}, 122, -9, 9);
    check_op(op, {{i, Layout::transposed}}, args(Ints({-1}), true, dt), reduce_ref(i, {-1}, true, DType::i64, init, acc, fin), "i64", rtol, atol);
    Host b = rand_host(DType::boolean, {4, 6}, 123);
    const DType bo = op == "aten.amax.default" ? DType::boolean : DType::i64;
    check_op(op, {{b}}, args(Ints({0}), false, dt), reduce_ref(b, {0}, false, bo, init, acc, fin), "bool", rtol, atol);
  }
}

Host softmax_ref(const Host& x, int dim) {
  if (dim < 0) dim += x.ndim();
  Host r{DType::f32, x.shape, std::vector<double>(x.numel())};
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.shape);
    double m = -kInf;
    for (int64_t k = 0; k < x.shape[dim]; ++k) {
      auto j = idx;
      j[dim] = k;
      m = std::max(m, at(x, j));
    }
    double sum = 0;
    for (int64_t k = 0; k < x.shape[dim]; ++k) {
      auto j = idx;
      j[dim] = k;
      sum += std::exp(at(x, j) - m);
    }
    r.v[i] = as_dtype(DType::f32, std::exp(x.v[i] - m) / sum);
  }
  return r;
}

Host cumsum_ref(const Host& x, int dim, DType out) {
  if (dim < 0) dim += x.ndim();
  Host r{out, x.shape, std::vector<double>(x.numel())};
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.shape);
    double s = 0;
    for (int64_t k = 0; k <= idx[dim]; ++k) {
      auto j = idx;
      j[dim] = k;
      s += at(x, j);
    }
    r.v[i] = as_dtype(out, s);
  }
  return r;
}

/// layer_norm over the trailing `nd` dims with optional weight and bias of that shape.
Host layer_norm_ref(const Host& x, int nd, const Host* w, const Host* b, double eps) {
  int64_t width = 1;
  for (int d = x.ndim() - nd; d < x.ndim(); ++d) width *= x.shape[d];
  Host r{DType::f32, x.shape, std::vector<double>(x.numel())};
  for (int64_t row = 0; row < x.numel() / width; ++row) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < width; ++k) mean += x.v[row * width + k];
    mean /= width;
    for (int64_t k = 0; k < width; ++k) var += (x.v[row * width + k] - mean) * (x.v[row * width + k] - mean);
    var /= width;
    for (int64_t k = 0; k < width; ++k) {
      double y = (x.v[row * width + k] - mean) / std::sqrt(var + eps);
      if (w) y *= w->v[k];
      if (b) y += b->v[k];
      r.v[row * width + k] = as_dtype(DType::f32, y);
    }
  }
  return r;
}

void add_reduction_cases(Cases& m) {
  m["aten.mean.dim"] = [] {
    check_reduction("aten.mean.dim", 0.0, [](double a, double x) { return a + x; }, [](double a, int64_t n) { return a / n; }, false);
  };
  m["aten.sum.dim_IntList"] = [] {
    check_reduction("aten.sum.dim_IntList", 0.0, [](double a, double x) { return a + x; }, [](double a, int64_t) { return a; }, true);
    Host x = rand_host(DType::f32, {2, 3}, 124);  // an empty dim list reduces everything
    check_op("aten.sum.dim_IntList", {{x}}, [](auto n) { return std::vector<Arg>{R(n[0]), Ints({}), B(false), None()}; },
             make_host(DType::f32, {}, {[&] { double s = 0; for (double v : x.v) s += v; return s; }()}), "dim []");
  };
  m["aten.amax.default"] = [] {
    check_reduction("aten.amax.default", -kInf, [](double a, double x) { return std::max(a, x); }, [](double a, int64_t) { return a; }, true);
    Host x = make_host(DType::f32, {2, 3}, {-kInf, -kInf, -1.0, 2.0, -kInf, 0.5});
    check_op("aten.amax.default", {{x, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), Ints({-1}), B(false)}; },
             make_host(DType::f32, {2}, {-1.0, 2.0}), "-inf entries");
  };
  for (const std::string op : {"aten.softmax.int", "aten._softmax.default"}) {
    m[op] = [op] {
      const bool legacy = op == "aten._softmax.default";
      auto args = [legacy](int64_t dim) {
        return [legacy, dim](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), I(dim), legacy ? B(false) : None()}; };
      };
      Host x = rand_host(DType::f32, {2, 3, 7}, 131, -6, 6);
      x.v[3] = -kInf;
      x.v[10] = -kInf;
      x.v[11] = -kInf;
      check_op(op, {{x}}, args(-1), softmax_ref(x, -1), "contiguous dim -1 with -inf", 1e-6, 1e-7);
      Host y = rand_host(DType::f32, {2, 5, 4}, 132, -6, 6);
      check_op(op, {{y, Layout::transposed}}, args(2), softmax_ref(y, 2), "transposed dim 2", 1e-6, 1e-7);
      check_op(op, {{y, Layout::strided}}, args(-1), softmax_ref(y, -1), "strided", 1e-6, 1e-7);
    };
  }
  m["aten.cumsum.default"] = [] {
    const std::string op = "aten.cumsum.default";
    auto args = [](int64_t dim) { return [dim](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), I(dim), None()}; }; };
    Host x = rand_host(DType::f32, {2, 5, 3}, 141);
    check_op(op, {{x, Layout::transposed}}, args(1), cumsum_ref(x, 1, DType::f32), "dim 1 transposed", 1e-5, 1e-6);
    check_op(op, {{x, Layout::strided}}, args(-1), cumsum_ref(x, -1, DType::f32), "dim -1 strided", 1e-5, 1e-6);
    check_op(op, {{x}}, args(0), cumsum_ref(x, 0, DType::f32), "dim 0", 1e-5, 1e-6);
    Host i = grid(DType::i64, {3, 6}, 142, -9, 9);
    check_op(op, {{i}}, args(-1), cumsum_ref(i, -1, DType::i64), "i64");
    Host b = rand_host(DType::boolean, {2, 7}, 143);
    check_op(op, {{b, Layout::transposed}}, args(1), cumsum_ref(b, 1, DType::i64), "bool -> i64 (position ids from a mask)");
  };
  m["aten.layer_norm.default"] = [] {
    const std::string op = "aten.layer_norm.default";
    const double eps = 1e-5;
    Host x = rand_host(DType::f32, {2, 3, 8}, 151, -3, 3), w = rand_host(DType::f32, {8}, 152), b = rand_host(DType::f32, {8}, 153);
    {
      OpGraph g;
      int xn = g.input(x, Layout::transposed), wn = g.param(w), bn = g.param(b);
      g.output(g.op(op, {R(xn), Ints({8}), R(wn), R(bn), F(eps), B(true)}, DType::f32, x.shape));
      expect_close(g.run(), layer_norm_ref(x, 1, &w, &b, eps), 1e-5, 1e-5, "weight and bias, transposed input");
    }
    check_op(op, {{x, Layout::strided}}, [eps](auto n) { return std::vector<Arg>{R(n[0]), Ints({8}), None(), None(), F(eps), B(true)}; },
             layer_norm_ref(x, 1, nullptr, nullptr, eps), "no affine, strided", 1e-5, 1e-5);
    Host w2 = rand_host(DType::f32, {3, 8}, 154);
    OpGraph g;
    int xn = g.input(x), wn = g.param(w2);
    g.output(g.op(op, {R(xn), Ints({3, 8}), R(wn), None(), F(0.1), B(true)}, DType::f32, x.shape));
    expect_close(g.run(), layer_norm_ref(x, 2, &w2, nullptr, 0.1), 1e-5, 1e-5, "two normalized dims, eps 0.1");
  };
}

// ---- products ------------------------------------------------------------------------------

/// y[..., n] = sum_k x[..., k] * W[n, k] (+ bias[n]).
Host linear_ref(const Host& x, const Host& w, const Host* bias) {
  const int64_t K = x.shape.back(), N = w.shape[0], M = x.numel() / K;
  Host y{DType::f32, x.shape, std::vector<double>(M * N)};
  y.shape.back() = N;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias->v[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += x.v[i * K + k] * w.v[n * K + k];
      y.v[i * N + n] = acc;
    }
  return y;
}

/// Batched matmul with broadcast batch dims.
Host matmul_ref(const Host& a, const Host& b) {
  const int64_t M = a.shape[a.ndim() - 2], K = a.shape.back(), N = b.shape.back();
  std::vector<int64_t> ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> batch = broadcast(ab, bb), shape = batch;
  shape.push_back(M);
  shape.push_back(N);
  Host r{DType::f32, shape, std::vector<double>(numel_of(shape))};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, shape);
    std::vector<int64_t> ia(a.ndim()), ib(b.ndim());
    for (int d = 0; d < a.ndim() - 2; ++d) ia[d] = a.shape[d] == 1 ? 0 : idx[idx.size() - 2 - (a.ndim() - 2) + d];
    for (int d = 0; d < b.ndim() - 2; ++d) ib[d] = b.shape[d] == 1 ? 0 : idx[idx.size() - 2 - (b.ndim() - 2) + d];
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      ia[a.ndim() - 2] = idx[idx.size() - 2];
      ia[a.ndim() - 1] = k;
      ib[b.ndim() - 2] = k;
      ib[b.ndim() - 1] = idx.back();
      acc += at(a, ia) * at(b, ib);
    }
    r.v[i] = acc;
  }
  return r;
}

void add_product_cases(Cases& m) {
  m["aten.linear.default"] = [] {
    const std::string op = "aten.linear.default";
    const double rtol = 1e-5, atol = 1e-4;
    Host w = rand_host(DType::f32, {12, 16}, 161), bias = rand_host(DType::f32, {12}, 162);
    {
      Host x = rand_host(DType::f32, {2, 3, 16}, 163);
      OpGraph g;
      int xn = g.input(x, Layout::transposed), wn = g.param(w), bn = g.param(bias);
      g.output(g.op(op, {R(xn), R(wn), R(bn)}, DType::f32, {2, 3, 12}));
      expect_close(g.run(), linear_ref(x, w, &bias), rtol, atol, "f32 weight, bias, transposed x");
    }
    for (DType wd : {DType::bf16, DType::f16}) {  // GEMM path (20 rows), 16-bit weights
      // against fp32 activations: the paths that round them to bf16 (avx512bf16, amx) are checked
      // by kernels_linear_test and test_bf16_agreement.py
      kernels::ScopedCpuIsa fp32_activations(std::min(kernels::cpu_isa(), kernels::Isa::avx512));
      Host x = rand_host(DType::f32, {1, 20, 16}, 164), w16 = rand_host(wd, {12, 16}, 165);
      OpGraph g;
      int xn = g.input(x), wn = g.param(w16);
      g.output(g.op(op, {R(xn), R(wn), None()}, DType::f32, {1, 20, 12}));
      expect_close(g.run(), linear_ref(x, w16, nullptr), rtol, atol, std::string(ir::dtype_name(wd)) + " weight, 20 rows");
    }
    {  // weight that is a transposed view ([16,12] stored) and a strided x
      Host x = rand_host(DType::f32, {4, 16}, 166);
      OpGraph g;
      int xn = g.input(x, Layout::strided), wn = g.param(w, Layout::transposed), bn = g.param(bias, Layout::strided);
      g.output(g.op(op, {R(xn), R(wn), R(bn)}, DType::f32, {4, 12}));
      expect_close(g.run(), linear_ref(x, w, &bias), rtol, atol, "non-dense weight");
    }
  };
  m["aten.addmm.default"] = [] {
    const std::string op = "aten.addmm.default";
    Host bias = rand_host(DType::f32, {12}, 171), x = rand_host(DType::f32, {5, 16}, 172);
    for (DType wd : {DType::f32, DType::bf16}) {
      // fp32 activations, as for linear above: avx512bf16 rounds them to bf16 for bf16 weights
      kernels::ScopedCpuIsa fp32_activations(std::min(kernels::cpu_isa(), kernels::Isa::avx512));
      for (Layout wl : {Layout::contiguous, Layout::transposed}) {
        Host w = rand_host(wd, {16, 12}, 173);  // [K, N], Conv1D layout
        Host wt = transpose_ref(w, 0, 1);         // y = x @ w = linear with W = w^T
        OpGraph g;
        int bn = g.param(bias), xn = g.input(x, Layout::strided), wn = g.param(w, wl);
        g.output(g.op(op, {R(bn), R(xn), R(wn), I(1), I(1)}, DType::f32, {5, 12}));
        expect_close(g.run(), linear_ref(x, wt, &bias), 1e-5, 2e-5,
                     std::string(ir::dtype_name(wd)) + (wl == Layout::transposed ? " non-dense" : " dense"));
      }
    }
  };
  auto mm_case = [](const std::string& op, const Host& a, Layout la, const Host& b, Layout lb, const std::string& what) {
    check_op(op, {{a, la}, {b, lb}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1])}; }, matmul_ref(a, b), what, 1e-5, 1e-5);
  };
  m["aten.matmul.default"] = [mm_case] {
    mm_case("aten.matmul.default", rand_host(DType::f32, {2, 1, 3, 4}, 181), Layout::contiguous, rand_host(DType::f32, {3, 4, 5}, 182),
            Layout::transposed, "broadcast batch, transposed rhs");
    mm_case("aten.matmul.default", rand_host(DType::f32, {1, 2, 6, 8}, 183), Layout::strided, rand_host(DType::f32, {8, 3}, 184),
            Layout::contiguous, "4-d @ 2-d, strided lhs");
  };
  m["aten.bmm.default"] = [mm_case] {
    mm_case("aten.bmm.default", rand_host(DType::f32, {2, 3, 4}, 185), Layout::transposed, rand_host(DType::f32, {2, 4, 5}, 186),
            Layout::strided, "strided operands");
  };
  m["aten.baddbmm.default"] = [] {
    const Host self = rand_host(DType::f32, {2, 1, 5}, 189), a = rand_host(DType::f32, {2, 3, 4}, 190),
               b = rand_host(DType::f32, {2, 4, 5}, 191);
    const Host prod = matmul_ref(a, b);
    Host want = prod;
    for (int64_t i = 0; i < want.numel(); ++i) {
      auto ix = unravel(i, want.shape);
      want.v[i] = as_dtype(DType::f32, 0.5 * at(self, {ix[0], 0, ix[2]}) + 2.0 * prod.v[i]);
    }
    check_op("aten.baddbmm.default", {{self}, {a, Layout::transposed}, {b, Layout::strided}},
             [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2]), F(0.5), F(2.0)}; }, want,
             "broadcast self, beta 0.5, alpha 2", 1e-5, 1e-5);
  };
  m["aten.mm.default"] = [mm_case] {
    mm_case("aten.mm.default", rand_host(DType::f32, {3, 4}, 187), Layout::transposed, rand_host(DType::f32, {4, 5}, 188),
            Layout::contiguous, "transposed lhs");
  };
  m["aten.embedding.default"] = [] {
    const std::string op = "aten.embedding.default";
    auto ref = [](const Host& w, const Host& idx) {
      const int64_t H = w.shape[1];
      Host r{DType::f32, idx.shape, {}};
      r.shape.push_back(H);
      for (double i : idx.v)
        for (int64_t h = 0; h < H; ++h) r.v.push_back(w.v[static_cast<int64_t>(i) * H + h]);
      return r;
    };
    for (DType wd : {DType::f32, DType::bf16}) {
      Host w = rand_host(wd, {10, 6}, 191);
      Host idx = grid(DType::i64, {2, 4}, 192, 0, 9);
      OpGraph g;
      int wn = g.param(w), in = g.input(idx, Layout::strided);
      g.output(g.op(op, {R(wn), R(in), I(-1), B(false), B(false)}, DType::f32, {2, 4, 6}));
      expect_close(g.run(), ref(w, idx), 0, 0, std::string(ir::dtype_name(wd)) + " weight, strided i64 ids");
    }
    Host w = rand_host(DType::f32, {10, 6}, 193);
    Host idx = grid(DType::i32, {5}, 194, 0, 9);
    OpGraph g;
    int wn = g.param(w), in = g.input(idx);
    g.output(g.op(op, {R(wn), R(in), I(-1), B(false), B(false)}, DType::f32, {5, 6}));
    expect_close(g.run(), ref(w, idx), 0, 0, "i32 ids");
    OpGraph bad;
    int bw = bad.param(w), bi = bad.input(make_host(DType::i64, {2}, {3, 10}));
    bad.output(bad.op(op, {R(bw), R(bi), I(-1), B(false), B(false)}, DType::f32, {2, 6}));
    try {
      bad.run();
      ADD_FAILURE() << "an id outside the vocabulary did not fail";
    } catch (const std::exception& e) {
      EXPECT_CONTAINS(e.what(), "outside the vocabulary");
    }
  };
}

// ---- views ----------------------------------------------------------------------------------

void add_view_cases(Cases& m) {
  auto one = [](Arg a) { return [a](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), a}; }; };
  auto two = [](Arg a, Arg b) { return [a, b](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), a, b}; }; };
  Host x = rand_host(DType::f32, {2, 3, 4}, 201);

  for (const std::string op : {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"}) {
    m[op] = [op, one, x] {
      const bool copies = op != "aten.view.default";
      check_op(op, {{x}}, one(Ints({6, -1})), reshape_ref(x, {6, 4}), "contiguous [6,-1]");
      check_op(op, {{x}}, one(Ints({4, 1, 6})), reshape_ref(x, {4, 1, 6}), "contiguous [4,1,6]");
      Host y = rand_host(DType::i64, {4, 6}, 202, -9, 9);
      check_op(op, {{y, Layout::strided}}, one(Ints({4, 2, 3})), reshape_ref(y, {4, 2, 3}), "strided, split last dim (a view)");
      Host z = rand_host(DType::f32, {3, 2, 4}, 203);
      // A transposed [3,2,4]: inserting a dim of 1 keeps it a view.
      check_op(op, {{z, Layout::transposed}}, one(Ints({3, 1, 2, 4})), reshape_ref(z, {3, 1, 2, 4}), "transposed, insert 1 (a view)");
      if (copies) {
        check_op(op, {{x, Layout::transposed}}, one(Ints({2, -1})), reshape_ref(x, {2, 12}), "transposed, merge (a copy)");
        check_op(op, {{y, Layout::strided}}, one(Ints({-1})), reshape_ref(y, {24}), "strided, flatten (a copy)");
      } else {
        EXPECT_CONTAINS(run_error(op, {{x, Layout::transposed}}, one(Ints({2, 12})), DType::f32, {2, 12}), "reshape");
      }
      // Sizes from a symbol bound by the input's shape.
      OpGraph g;
      int in = g.input(x, Layout::contiguous, {"", "s0", ""});
      g.output(g.op(op, {R(in), L({I(2), Sym("s0*4")})}, DType::f32, {2, 12}));
      expect_close(g.run(), reshape_ref(x, {2, 12}), 0, 0, "symbolic size");
    };
  }
  m["aten.transpose.int"] = [two, x] {
    check_op("aten.transpose.int", {{x}}, two(I(0), I(-1)), transpose_ref(x, 0, 2), "0,-1");
    check_op("aten.transpose.int", {{x, Layout::strided}}, two(I(-2), I(0)), transpose_ref(x, 1, 0), "strided -2,0");
    Host b = rand_host(DType::boolean, {3, 5}, 204);
    check_op("aten.transpose.int", {{b}}, two(I(1), I(0)), transpose_ref(b, 0, 1), "bool");
  };
  m["aten.t.default"] = [] {
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0])}; };
    Host a = rand_host(DType::f32, {3, 5}, 205);
    check_op("aten.t.default", {{a, Layout::strided}}, args, transpose_ref(a, 0, 1), "2-d strided");
    Host v = rand_host(DType::i64, {4}, 206, -9, 9);
    check_op("aten.t.default", {{v}}, args, v, "1-d");
  };
  m["aten.permute.default"] = [one, x] {
    check_op("aten.permute.default", {{x}}, one(Ints({2, 0, 1})), permute_ref(x, {2, 0, 1}), "2,0,1");
    check_op("aten.permute.default", {{x, Layout::transposed}}, one(Ints({-1, 0, -2})), permute_ref(x, {2, 0, 1}),
             "transposed input, negative dims");
  };
  m["aten.unsqueeze.default"] = [one] {
    Host a = rand_host(DType::f32, {2, 3}, 207);
    check_op("aten.unsqueeze.default", {{a}}, one(I(0)), reshape_ref(a, {1, 2, 3}), "dim 0");
    check_op("aten.unsqueeze.default", {{a, Layout::transposed}}, one(I(1)), reshape_ref(a, {2, 1, 3}), "transposed dim 1");
    check_op("aten.unsqueeze.default", {{a, Layout::strided}}, one(I(-1)), reshape_ref(a, {2, 3, 1}), "strided dim -1");
    // A view of an unsqueezed strided tensor reads its strides: expand the new dim.
    OpGraph g;
    int in = g.input(a, Layout::strided);
    int u = g.op("aten.unsqueeze.default", {R(in), I(-2)}, DType::f32, {2, 1, 3});
    g.output(g.op("aten.expand.default", {R(u), Ints({2, 4, 3}), B(false)}, DType::f32, {2, 4, 3}));
    expect_close(g.run(), expand_ref(reshape_ref(a, {2, 1, 3}), {2, 4, 3}), 0, 0, "unsqueeze then expand");
  };
  m["aten.squeeze.dim"] = [one] {
    Host a = rand_host(DType::f32, {2, 1, 3}, 208);
    check_op("aten.squeeze.dim", {{a, Layout::strided}}, one(I(1)), reshape_ref(a, {2, 3}), "dim 1");
    check_op("aten.squeeze.dim", {{a}}, one(I(-2)), reshape_ref(a, {2, 3}), "dim -2");
    check_op("aten.squeeze.dim", {{a}}, one(I(0)), a, "dim of size 2 stays");
  };
  m["aten.squeeze.dims"] = [one] {
    Host a = rand_host(DType::f32, {1, 2, 1, 3, 1}, 209);
    check_op("aten.squeeze.dims", {{a}}, one(Ints({0, -1})), reshape_ref(a, {2, 1, 3}), "0,-1");
    check_op("aten.squeeze.dims", {{a, Layout::transposed}}, one(Ints({2, 1})), reshape_ref(a, {1, 2, 3, 1}),
             "transposed, one dim of size 2 listed");
  };
  m["aten.squeeze.default"] = [] {
    Host a = rand_host(DType::i64, {1, 2, 1, 3, 1}, 210, -9, 9);
    check_op("aten.squeeze.default", {{a}}, [](auto n) { return std::vector<Arg>{R(n[0])}; }, reshape_ref(a, {2, 3}), "all ones");
  };
  m["aten.slice.Tensor"] = [] {
    const std::string op = "aten.slice.Tensor";
    auto args = [](int64_t dim, Arg start, Arg end, int64_t step) {
      return [=](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), I(dim), start, end, I(step)}; };
    };
    Host a = rand_host(DType::f32, {4, 6, 5}, 211);
    check_op(op, {{a}}, args(1, I(1), I(5), 2), slice_ref(a, 1, 1, 2, 2), "dim 1 [1:5:2]");
    check_op(op, {{a, Layout::transposed}}, args(-1, I(-3), None(), 1), slice_ref(a, 2, 2, 3), "dim -1 [-3:]");
    check_op(op, {{a}}, args(0, None(), I(-1), 1), slice_ref(a, 0, 0, 3), "[:-1]");
    check_op(op, {{a}}, args(2, I(0), I(kInt64Max), 3), slice_ref(a, 2, 0, 2, 3), "end INT64_MAX, step 3");
    check_op(op, {{a}}, args(1, I(-100), I(100), 1), a, "clamped bounds");
    check_op(op, {{a}}, args(1, I(4), I(2), 1), slice_ref(a, 1, 4, 0), "empty");
    check_op(op, {{a, Layout::strided}}, args(-1, I(1), I(4), 2), slice_ref(a, 2, 1, 2, 2), "slice of a slice");
  };
  m["aten.select.int"] = [two] {
    Host a = rand_host(DType::f32, {3, 4, 5}, 212);
    check_op("aten.select.int", {{a}}, two(I(1), I(-1)), select_ref(a, 1, 3), "dim 1 index -1");
    check_op("aten.select.int", {{a, Layout::strided}}, two(I(-1), I(2)), select_ref(a, 2, 2), "strided dim -1");
    check_op("aten.select.int", {{a, Layout::transposed}}, two(I(0), I(2)), select_ref(a, 0, 2), "transposed dim 0");
  };
  m["aten.expand.default"] = [] {
    auto args = [](Arg sizes) { return [sizes](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), sizes, B(false)}; }; };
    Host a = rand_host(DType::f32, {3, 1}, 213);
    check_op("aten.expand.default", {{a}}, args(Ints({2, 3, 4})), expand_ref(a, {2, 3, 4}), "new leading dim");
    check_op("aten.expand.default", {{a}}, args(Ints({2, -1, 4})), expand_ref(a, {2, 3, 4}), "-1 keeps a dim");
    Host b = rand_host(DType::i64, {1, 4}, 214, -9, 9);
    check_op("aten.expand.default", {{b, Layout::strided}}, args(Ints({3, 4})), expand_ref(b, {3, 4}), "strided");
    // GQA's repeat_kv: [1,2,1,5,3] -> [1,2,4,5,3] from a transposed source.
    Host k = rand_host(DType::f32, {1, 2, 1, 5, 3}, 215);
    check_op("aten.expand.default", {{k, Layout::transposed}}, args(Ints({1, 2, 4, 5, 3})), expand_ref(k, {1, 2, 4, 5, 3}), "repeat_kv");
  };

  // List-valued ops: each part comes out through getitem.
  auto parts = [](const std::string& op, const In& in, std::vector<Arg> args_tail, const std::vector<Host>& want, const std::string& what) {
    SCOPED_TRACE(op + ": " + what);
    for (int k = 0; k < static_cast<int>(want.size()); ++k) {
      for (int idx : {k, k - static_cast<int>(want.size())}) {
        OpGraph g;
        int n = g.input(in.t, in.layout);
        std::vector<Arg> args{R(n)};
        args.insert(args.end(), args_tail.begin(), args_tail.end());
        int list = g.op_list(op, args, in.t.dtype, static_cast<int>(want.size()));
        g.output(g.op("getitem", {R(list), I(idx)}, want[k].dtype, want[k].shape));
        expect_close(g.run(), want[k], 0, 0, "part " + std::to_string(idx));
      }
    }
  };
  m["aten.split.Tensor"] = [parts] {
    Host a = rand_host(DType::f32, {2, 7, 3}, 216);
    parts("aten.split.Tensor", {a}, {I(3), I(1)}, {slice_ref(a, 1, 0, 3), slice_ref(a, 1, 3, 3), slice_ref(a, 1, 6, 1)}, "3 along dim 1");
    parts("aten.split.Tensor", {a, Layout::transposed}, {I(2), I(-1)}, {slice_ref(a, 2, 0, 2), slice_ref(a, 2, 2, 1)}, "transposed dim -1");
  };
  m["aten.split_with_sizes.default"] = [parts] {
    Host a = rand_host(DType::f32, {2, 7, 3}, 217);
    parts("aten.split_with_sizes.default", {a, Layout::strided}, {Ints({2, 4, 1}), I(-2)},
          {slice_ref(a, 1, 0, 2), slice_ref(a, 1, 2, 4), slice_ref(a, 1, 6, 1)}, "2,4,1 along dim -2");
  };
  m["aten.chunk.default"] = [parts] {
    Host a = rand_host(DType::i64, {2, 7}, 218, -9, 9);
    parts("aten.chunk.default", {a}, {I(3), I(-1)}, {slice_ref(a, 1, 0, 3), slice_ref(a, 1, 3, 3), slice_ref(a, 1, 6, 1)}, "7 in 3");
    Host b = rand_host(DType::f32, {6, 2}, 219);
    parts("aten.chunk.default", {b, Layout::transposed}, {I(4), I(-1)}, {slice_ref(b, 1, 0, 1), slice_ref(b, 1, 1, 1)}, "2 columns in 4 chunks");
    parts("aten.chunk.default", {b}, {I(4), I(0)}, {slice_ref(b, 0, 0, 2), slice_ref(b, 0, 2, 2), slice_ref(b, 0, 4, 2)}, "6 in 4 -> 3 chunks");
  };
  m["aten.unbind.int"] = [parts] {
    Host a = rand_host(DType::f32, {3, 4}, 220);
    parts("aten.unbind.int", {a}, {I(0)}, {select_ref(a, 0, 0), select_ref(a, 0, 1), select_ref(a, 0, 2)}, "dim 0");
    parts("aten.unbind.int", {a, Layout::strided}, {I(-1)},
          {select_ref(a, 1, 0), select_ref(a, 1, 1), select_ref(a, 1, 2), select_ref(a, 1, 3)}, "strided dim -1");
  };
  m["aten.flatten.using_ints"] = [two] {
    Host a = rand_host(DType::f32, {2, 3, 4, 5}, 221);
    check_op("aten.flatten.using_ints", {{a}}, two(I(1), I(2)), reshape_ref(a, {2, 12, 5}), "1..2");
    check_op("aten.flatten.using_ints", {{a}}, two(I(0), I(-1)), reshape_ref(a, {120}), "all");
    check_op("aten.flatten.using_ints", {{a, Layout::transposed}}, two(I(-2), I(-1)), reshape_ref(a, {2, 3, 20}),
             "transposed input (a copy)");
    check_op("aten.flatten.using_ints", {{a, Layout::strided}}, two(I(0), I(1)), reshape_ref(a, {6, 4, 5}), "strided input, leading dims (a view)");
  };
  for (const std::string op : {"aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default"}) {
    m[op] = [op, x] { check_op(op, {{x, Layout::transposed}}, [](auto n) { return std::vector<Arg>{R(n[0])}; }, x, "identity"); };
  }
  m["aten.dropout.default"] = [x] {
    check_op("aten.dropout.default", {{x, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(0.1), B(false)}; }, x, "eval mode");
  };
}

// ---- makers and converters ------------------------------------------------------------------

void add_misc_cases(Cases& m) {
  m["aten.cat.default"] = [] {
    const std::string op = "aten.cat.default";
    auto cat_ref = [](const std::vector<Host>& xs, int dim, DType out) {
      Host r{out, {}, {}};
      for (const auto& x : xs)
        if (!(x.ndim() == 1 && x.shape[0] == 0)) { r.shape = x.shape; break; }
      if (dim < 0) dim += static_cast<int>(r.shape.size());
      r.shape[dim] = 0;
      for (const auto& x : xs)
        if (!(x.ndim() == 1 && x.shape[0] == 0)) r.shape[dim] += x.shape[dim];
      r.v.resize(r.numel());
      for (int64_t i = 0; i < r.numel(); ++i) {
        auto idx = unravel(i, r.shape);
        for (const auto& x : xs) {
          if (x.ndim() == 1 && x.shape[0] == 0) continue;
          if (idx[dim] < x.shape[dim]) {
            r.v[i] = as_dtype(out, at(x, idx));
            break;
          }
          idx[dim] -= x.shape[dim];
        }
      }
      return r;
    };
    auto list_args = [](int dim) {
      return [dim](const std::vector<int>& n) {
        std::vector<Arg> l;
        for (int k : n) l.push_back(R(k));
        return std::vector<Arg>{L(l), I(dim)};
      };
    };
    Host a = rand_host(DType::f32, {2, 3, 2}, 231), b = rand_host(DType::f32, {2, 3, 1}, 232), c = rand_host(DType::f32, {2, 3, 4}, 233);
    check_op(op, {{a, Layout::transposed}, {b}, {c, Layout::strided}}, list_args(-1), cat_ref({a, b, c}, -1, DType::f32), "dim -1, mixed layouts");
    Host d = rand_host(DType::f32, {2, 5, 2}, 238);
    check_op(op, {{a}, {d, Layout::transposed}}, list_args(1), cat_ref({a, d}, 1, DType::f32), "dim 1");
    Host i = grid(DType::i64, {1, 3}, 234, -9, 9), j = grid(DType::i64, {2, 3}, 235, -9, 9);
    check_op(op, {{i}, {j, Layout::strided}}, list_args(0), cat_ref({i, j}, 0, DType::i64), "i64 dim 0");
    Host e{DType::f32, {0}, {}};
    check_op(op, {{e}, {a}, {b}}, list_args(2), cat_ref({e, a, b}, 2, DType::f32), "legacy empty tensor first");
    Host p = rand_host(DType::boolean, {2, 2}, 236);
    Host q = rand_host(DType::f32, {2, 3}, 237);
    check_op(op, {{p}, {q}}, list_args(-1), cat_ref({p, q}, -1, DType::f32), "bool and f32 -> f32");
  };

  // Converters: the output dtype comes from the node; the schemas differ in where dtype sits.
  struct Conv {
    std::string op;
    std::function<std::vector<Arg>(int x, int other, DType d)> args;
    bool needs_other = false;
  };
  std::vector<Conv> convs = {
      {"aten.to.dtype", [](int x, int, DType d) { return std::vector<Arg>{R(x), Dt(d), B(false), B(false), None()}; }},
      {"aten.to.dtype_layout", [](int x, int, DType d) { return std::vector<Arg>{R(x), Dt(d), None(), Dev(), None(), B(false), B(false), None()}; }},
      {"aten.to.device", [](int x, int, DType d) { return std::vector<Arg>{R(x), Dev(), Dt(d), B(false), B(false), None()}; }},
      {"aten.to.other", [](int x, int o, DType) { return std::vector<Arg>{R(x), R(o), B(false), B(false), None()}; }, true},
      {"aten.type_as.default", [](int x, int o, DType) { return std::vector<Arg>{R(x), R(o)}; }, true},
      {"aten._to_copy.default", [](int x, int, DType d) { return std::vector<Arg>{R(x), Dt(d), None(), None(), None(), B(false), None()}; }},
  };
  for (const auto& cv : convs) {
    m[cv.op] = [cv] {
      Host f = make_host(DType::f32, {2, 4}, {-2.75, -1.5, -0.5, 0.0, 0.3, 1.0 / 3.0, 2.5, 1e-3});
      Host big = make_host(DType::f32, {2, 3}, {65504.0, 70000.0, 1.0e-8, -3.0e38, 1.00390625, 1.0 + 1.0 / 256 + 1.0 / 65536});
      Host i = grid(DType::i64, {2, 3}, 238, -9, 9);
      Host b = rand_host(DType::boolean, {3, 2}, 239);
      struct Step {
        Host x;
        Layout layout;
        DType to;
      };
      std::vector<Step> steps = {{f, Layout::transposed, DType::i64}, {f, Layout::strided, DType::boolean}, {f, Layout::contiguous, DType::bf16},
                                 {big, Layout::transposed, DType::bf16}, {big, Layout::strided, DType::f16}, {f, Layout::transposed, DType::f16},
                                 {i, Layout::transposed, DType::f32}, {b, Layout::strided, DType::f32}, {i, Layout::contiguous, DType::boolean},
                                 {f, Layout::transposed, DType::f32}, {i, Layout::strided, DType::i32}};
      for (const auto& s : steps) {
        OpGraph g;
        int xn = g.input(s.x, s.layout);
        int other = cv.needs_other ? g.input(make_host(s.to, {1}, {0})) : -1;
        g.output(g.op(cv.op, cv.args(xn, other, s.to), s.to, s.x.shape));
        std::string what = std::string(ir::dtype_name(s.x.dtype)) + " -> " + std::string(ir::dtype_name(s.to));
        try {
          expect_close(g.run(), cast_ref(s.x, s.to), 0, 0, what);
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << " threw " << e.what();
        }
      }
    };
  }
  for (const std::string op : {"aten.clone.default", "aten.contiguous.default"}) {
    m[op] = [op] {
      for (Layout l : {Layout::transposed, Layout::strided, Layout::contiguous}) {
        Host x = rand_host(DType::f32, {2, 3, 4}, 240);
        bool contiguous = false;
        Host got = run_op(op, {{x, l}}, [](auto n) { return std::vector<Arg>{R(n[0]), None()}; }, DType::f32, x.shape, &contiguous);
        expect_close(got, x, 0, 0, "values");
        EXPECT_TRUE(contiguous) << op << " returned a strided tensor";
      }
      Host i = grid(DType::i64, {3, 2}, 241, -9, 9);
      check_op(op, {{i, Layout::transposed}}, [](auto n) { return std::vector<Arg>{R(n[0]), None()}; }, i, "i64");
    };
  }

  // Factories take their sizes as int lists, possibly symbolic.
  auto factory = [](const std::string& op, std::vector<Arg> args, DType d, std::vector<int64_t> shape, double value, const std::string& what) {
    OpGraph g;
    Host x = rand_host(DType::f32, {1, 5, 2}, 242);
    g.input(x, Layout::contiguous, {"", "s0", ""});  // binds s0 = 5
    g.output(g.op(op, args, d, shape));
    Host want{d, shape, std::vector<double>(numel_of(shape), as_dtype(d, value))};
    expect_close(g.run(), want, 0, 0, op + " " + what);
  };
  auto kw = [](DType d) { return std::vector<Arg>{Dt(d), None(), Dev(), None()}; };  // dtype, layout, device, pin_memory
  auto cat_args = [](std::vector<Arg> a, const std::vector<Arg>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  m["aten.ones.default"] = [=] {
    factory("aten.ones.default", cat_args({Ints({2, 3})}, kw(DType::f32)), DType::f32, {2, 3}, 1, "f32");
    factory("aten.ones.default", cat_args({L({Sym("s0"), I(2)})}, kw(DType::boolean)), DType::boolean, {5, 2}, 1, "bool, symbolic size");
  };
  m["aten.zeros.default"] = [=] {
    factory("aten.zeros.default", cat_args({L({I(1), Sym("s0 + 1")})}, kw(DType::i64)), DType::i64, {1, 6}, 0, "i64");
    factory("aten.zeros.default", cat_args({Ints({4})}, kw(DType::f32)), DType::f32, {4}, 0, "f32");
  };
  m["aten.full.default"] = [=] {
    factory("aten.full.default", cat_args({Ints({2, 3}), F(-kInf)}, kw(DType::f32)), DType::f32, {2, 3}, -kInf, "-inf");
    factory("aten.full.default", cat_args({L({Sym("s0")}), I(7)}, kw(DType::i64)), DType::i64, {5}, 7, "i64");
    factory("aten.full.default", cat_args({Ints({3}), B(true)}, kw(DType::boolean)), DType::boolean, {3}, 1, "bool");
  };
  auto like = [](const std::string& op, std::vector<Arg> tail, DType d, double value, std::vector<int64_t> shape = {2, 3, 4}) {
    Host x = rand_host(DType::f32, {2, 3, 4}, 243);
    OpGraph g;
    int n = g.input(x, Layout::transposed);
    std::vector<Arg> args{R(n)};
    args.insert(args.end(), tail.begin(), tail.end());
    g.output(g.op(op, args, d, shape));
    Host want{d, shape, std::vector<double>(numel_of(shape), as_dtype(d, value))};
    expect_close(g.run(), want, 0, 0, op + " " + std::string(ir::dtype_name(d)));
  };
  auto like_kw = [](DType d) { return std::vector<Arg>{Dt(d), None(), Dev(), None(), None()}; };
  m["aten.ones_like.default"] = [=] {
    like("aten.ones_like.default", like_kw(DType::f32), DType::f32, 1);
    like("aten.ones_like.default", like_kw(DType::i64), DType::i64, 1);
  };
  m["aten.zeros_like.default"] = [=] {
    like("aten.zeros_like.default", like_kw(DType::f32), DType::f32, 0);
    like("aten.zeros_like.default", like_kw(DType::boolean), DType::boolean, 0);
  };
  m["aten.full_like.default"] = [=] {
    like("aten.full_like.default", cat_args({F(2.5)}, like_kw(DType::f32)), DType::f32, 2.5);
    like("aten.full_like.default", cat_args({I(-3)}, like_kw(DType::i64)), DType::i64, -3);
  };
  m["aten.new_ones.default"] = [=] {
    like("aten.new_ones.default", cat_args({Ints({4, 5})}, kw(DType::f32)), DType::f32, 1, {4, 5});
  };
  m["aten.new_zeros.default"] = [=] {
    like("aten.new_zeros.default", cat_args({Ints({3})}, kw(DType::i64)), DType::i64, 0, {3});
  };
  auto arange = [=](const std::string& op, std::vector<Arg> bounds, DType d, std::vector<double> want, const std::string& what) {
    OpGraph g;
    g.input(rand_host(DType::f32, {1, 5, 2}, 244), Layout::contiguous, {"", "s0", ""});
    g.output(g.op(op, cat_args(bounds, kw(d)), d, {static_cast<int64_t>(want.size())}));
    expect_close(g.run(), make_host(d, {static_cast<int64_t>(want.size())}, want), 0, 0, op + " " + what);
  };
  m["aten.arange.default"] = [=] {
    arange("aten.arange.default", {I(5)}, DType::i64, {0, 1, 2, 3, 4}, "i64");
    arange("aten.arange.default", {Sym("s0")}, DType::f32, {0, 1, 2, 3, 4}, "symbolic end, f32");
    arange("aten.arange.default", {I(0)}, DType::i64, {}, "empty");
  };
  m["aten.arange.start"] = [=] {
    arange("aten.arange.start", {I(2), Sym("s0 + 2")}, DType::i64, {2, 3, 4, 5, 6}, "symbolic end");
    arange("aten.arange.start", {F(-1.5), F(1.0)}, DType::f32, {-1.5, -0.5, 0.5}, "real bounds");
  };
  m["aten.arange.start_step"] = [=] {
    arange("aten.arange.start_step", {I(0), I(10), I(3)}, DType::i64, {0, 3, 6, 9}, "step 3");
    arange("aten.arange.start_step", {F(1.0), F(-1.0), F(-0.5)}, DType::f32, {1.0, 0.5, 0.0, -0.5}, "negative step");
    arange("aten.arange.start_step", {I(0), I(16), I(2)}, DType::f32, {0, 2, 4, 6, 8, 10, 12, 14}, "rope inv_freq exponents");
  };
}

// ---- scalar arithmetic and getitem ----------------------------------------------------------

/// A graph whose scalar result reaches the output through aten.full([1], value, dtype=f64).
/// build(g, x) makes the scalar node from the input x [2, 5, 3] (dim 1 symbolic).
double scalar_result(const std::function<int(OpGraph&, int)>& build) {
  OpGraph g;
  int x = g.input(rand_host(DType::f32, {2, 5, 3}, 251), Layout::contiguous, {"", "s0", ""});
  int s = build(g, x);
  g.output(g.op("aten.full.default", {Ints({1}), R(s), Dt(DType::f64), None(), Dev(), None()}, DType::f64, {1}));
  Host h = g.run();
  return h.v.at(0);
}

void add_scalar_cases(Cases& m) {
  m["aten.sym_size.int"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int x) { return g.op_scalar("aten.sym_size.int", {R(x), I(1)}); }), 5);
    EXPECT_EQ(scalar_result([](OpGraph& g, int x) { return g.op_scalar("aten.sym_size.int", {R(x), I(-1)}); }), 3);
    // As a size: full([sym_size(x, 0)], 0.5).
    OpGraph g;
    int x = g.input(rand_host(DType::f32, {4, 2}, 252), Layout::transposed);
    int s = g.op_scalar("aten.sym_size.int", {R(x), I(0)});
    g.output(g.op("aten.full.default", {L({R(s)}), F(0.5), Dt(DType::f32), None(), Dev(), None()}, DType::f32, {4}));
    expect_close(g.run(), make_host(DType::f32, {4}, {0.5, 0.5, 0.5, 0.5}), 0, 0, "size of a transposed input");
  };
  m["aten.sym_numel.default"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int x) { return g.op_scalar("aten.sym_numel.default", {R(x)}); }), 30);
  };
  m["getitem"] = [] {
    // Covered with every list op above; here with a negative index and on a list of sizes.
    Host a = rand_host(DType::f32, {6, 2}, 253);
    OpGraph g;
    int x = g.input(a);
    int l = g.op_list("aten.split.Tensor", {R(x), I(4), I(0)}, DType::f32, 2);
    g.output(g.op("getitem", {R(l), I(-1)}, DType::f32, {2, 2}));
    expect_close(g.run(), slice_ref(a, 0, 4, 2), 0, 0, "split(...)[-1]");
    OpGraph bad;
    int y = bad.input(a);
    bad.output(bad.op("getitem", {R(y), I(0)}, DType::f32, {2}));
    try {
      bad.run();
      ADD_FAILURE() << "getitem on a tensor did not fail";
    } catch (const std::exception& e) {
      EXPECT_CONTAINS(e.what(), "getitem");
    }
  };
  // s = 5 (sym_size(x, 1)), t = 3 (sym_size(x, 2)).
  auto binop = [](const std::string& op, bool negate_lhs, double want) {
    double got = scalar_result([&](OpGraph& g, int x) {
      int s = g.op_scalar("aten.sym_size.int", {R(x), I(1)});
      int t = g.op_scalar("aten.sym_size.int", {R(x), I(2)});
      if (negate_lhs) s = g.op_scalar("operator.neg", {R(s)});
      return g.op_scalar(op, {R(s), R(t)});
    });
    EXPECT_EQ(got, want) << op << (negate_lhs ? " with lhs -5" : "");
  };
  m["operator.add"] = [binop] { binop("operator.add", false, 8); };
  m["operator.sub"] = [binop] { binop("operator.sub", false, 2); binop("operator.sub", true, -8); };
  m["operator.mul"] = [binop] { binop("operator.mul", false, 15); };
  m["operator.floordiv"] = [binop] { binop("operator.floordiv", false, 1); binop("operator.floordiv", true, -2); };
  m["operator.mod"] = [binop] { binop("operator.mod", false, 2); binop("operator.mod", true, 1); };
  m["operator.truediv"] = [binop] { binop("operator.truediv", false, 5.0 / 3.0); binop("operator.truediv", true, -5.0 / 3.0); };
  m["operator.neg"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int x) {
                return g.op_scalar("operator.neg", {R(g.op_scalar("aten.sym_size.int", {R(x), I(1)}))});
              }), -5);
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("operator.neg", {F(0.25)}); }), -0.25);
  };
  m["torch.sym_float"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int x) {
                int f = g.op_scalar("torch.sym_float", {R(g.op_scalar("aten.sym_size.int", {R(x), I(1)}))});
                return g.op_scalar("operator.truediv", {R(f), I(2)});
              }), 2.5);
  };
  m["math.trunc"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.trunc", {F(2.75)}); }), 2);
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.trunc", {F(-2.75)}); }), -2);
  };
  m["math.floor"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.floor", {F(2.75)}); }), 2);
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.floor", {F(-2.25)}); }), -3);
  };
  m["math.ceil"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.ceil", {F(2.25)}); }), 3);
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("math.ceil", {F(-2.75)}); }), -2);
  };
  m["torch.sym_int"] = [] {
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("torch.sym_int", {F(2.75)}); }), 2);
    EXPECT_EQ(scalar_result([](OpGraph& g, int) { return g.op_scalar("torch.sym_int", {F(-2.75)}); }), -2);  // Python int() truncates
  };
  m["torch.sym_max"] = [binop] { binop("torch.sym_max", false, 5); binop("torch.sym_max", true, 3); };
  m["torch.sym_min"] = [binop] { binop("torch.sym_min", false, 3); binop("torch.sym_min", true, -5); };
}

// ---------------------------------------------------------------------------------------------
// fuselm.attention over a paged KV cache.

struct AttnConfig {
  int64_t hq = 4, hkv = 2, d = 8, dv = 6;
  int64_t window = -1;
  int64_t chunk = -1;
  std::string mask = "causal";
  double softcap = 0;
  bool sinks = false;
  double scale = 0.35;
  bool q_head_dim_strided = false;  // q's head dim with a stride other than 1
  bool k_head_broadcast = false;    // one K head expanded to hkv heads (a zero head stride)
  int layer = 1;
  std::vector<double> alibi;        // per-head ALiBi slopes (alibi_slopes), empty: none
};

/// One sequence's data: per position q [hq][d], k [hkv][d], v [hkv][dv].
struct SeqData {
  std::vector<std::vector<double>> q, k, v;
};

SeqData make_seq(const AttnConfig& c, int64_t len, uint32_t seed) {
  SeqData s;
  Host q = rand_host(DType::f32, {len, c.hq * c.d}, seed, -1.5, 1.5);
  Host k = rand_host(DType::f32, {len, c.hkv * c.d}, seed + 1, -1.5, 1.5);
  Host v = rand_host(DType::f32, {len, c.hkv * c.dv}, seed + 2, -2, 2);
  for (int64_t p = 0; p < len; ++p) {
    s.q.emplace_back(q.v.begin() + p * c.hq * c.d, q.v.begin() + (p + 1) * c.hq * c.d);
    s.k.emplace_back(k.v.begin() + p * c.hkv * c.d, k.v.begin() + (p + 1) * c.hkv * c.d);
    s.v.emplace_back(v.v.begin() + p * c.hkv * c.dv, v.v.begin() + (p + 1) * c.hkv * c.dv);
  }
  return s;
}

/// transformers' eager attention for one query position against positions 0..pos of the same
/// sequence: scale, softcap, causal + sliding-window mask, sinks, GQA, and an ALiBi bias
/// slope[h] · j in bloom's key-position form; out [dv] for head h.
std::vector<double> attend_ref(const AttnConfig& c, const SeqData& s, int64_t pos, int64_t h, const std::vector<double>& sinks) {
  const int64_t kh = h / (c.hq / c.hkv);
  std::vector<double> logits;
  std::vector<int64_t> keys;
  for (int64_t j = 0; j <= pos; ++j) {
    if (c.window > 0 && pos - j >= c.window) continue;
    if (c.chunk > 0 && j / c.chunk != pos / c.chunk) continue;
    double dot = 0;
    for (int64_t e = 0; e < c.d; ++e) dot += s.q[pos][h * c.d + e] * s.k[j][kh * c.d + e];
    double l = dot * c.scale;
    if (c.softcap > 0) l = c.softcap * std::tanh(l / c.softcap);
    if (!c.alibi.empty()) l += c.alibi[h] * static_cast<double>(j);
    logits.push_back(l);
    keys.push_back(j);
  }
  double m = -kInf;
  for (double l : logits) m = std::max(m, l);
  if (!sinks.empty()) m = std::max(m, sinks[h]);
  double z = sinks.empty() ? 0.0 : std::exp(sinks[h] - m);
  for (double l : logits) z += std::exp(l - m);
  std::vector<double> out(c.dv, 0.0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const double p = std::exp(logits[i] - m) / z;
    for (int64_t e = 0; e < c.dv; ++e) out[e] += p * s.v[keys[i]][kh * c.dv + e];
  }
  return out;
}

/// What one step schedules for a sequence: positions [first, first + count).
struct Chunk {
  int seq;
  int64_t first, count;
};

void check_attention(const AttnConfig& c) {
  SCOPED_TRACE("attention hq " + std::to_string(c.hq) + " hkv " + std::to_string(c.hkv) + " window " + std::to_string(c.window) +
               " softcap " + std::to_string(c.softcap) + (c.sinks ? " sinks" : "") + (c.alibi.empty() ? "" : " alibi"));
  // Three sequences over two steps: A prefills 5 then 3 more; B prefills 2 then decodes 1;
  // C arrives in step 2 with 4 prompt tokens. Context lengths after step 2: 8, 3, 4.
  std::vector<SeqData> seqs = {make_seq(c, 8, 301), make_seq(c, 3, 311), make_seq(c, 4, 321)};
  if (c.k_head_broadcast)
    for (auto& s : seqs)
      for (auto& row : s.k)
        for (int64_t h = 1; h < c.hkv; ++h) std::copy_n(row.begin(), c.d, row.begin() + h * c.d);
  const int64_t k_heads = c.k_head_broadcast ? 1 : c.hkv;  // K heads stored in the input
  std::vector<std::vector<Chunk>> steps = {{{0, 0, 5}, {1, 0, 2}}, {{1, 2, 1}, {0, 5, 3}, {2, 0, 4}}};

  // Two layers so the op must pick layer_idx; block size 2 so that sequences' slots interleave.
  const int32_t block_size = 2, num_blocks = 16;
  std::vector<kv::LayerShape> layers(2, kv::LayerShape{c.hkv * c.d, c.hkv * c.dv});
  kv::PagedKvCache cache(layers, num_blocks, block_size);
  for (int l = 0; l < 2; ++l) {  // never-written slots must not be read
    std::fill_n(cache.k(l), int64_t{num_blocks} * block_size * c.hkv * c.d, NAN);
    std::fill_n(cache.v(l), int64_t{num_blocks} * block_size * c.hkv * c.dv, NAN);
  }
  std::vector<kv::SequenceKv> seq_kv(seqs.size());
  std::vector<int64_t> ctx(seqs.size(), 0);

  // Graph: q stored [1, T, Hq, D] (or [1, Hq, D, T]), k stored [1, T, Hkv, D], v stored
  // [1, Hkv, T, Dv]; q and k reach attention as transposes, as they do in HF models.
  std::vector<double> sinks;
  if (c.sinks) sinks = rand_host(DType::f32, {c.hq}, 331, -1, 2).v;
  OpGraph g;
  const int64_t t0 = 5 + 2;
  Host q0 = c.q_head_dim_strided ? Host{DType::f32, {1, c.hq, c.d, t0}, std::vector<double>(c.hq * c.d * t0)}
                                 : Host{DType::f32, {1, t0, c.hq, c.d}, std::vector<double>(t0 * c.hq * c.d)};
  int qn = g.input(q0, Layout::contiguous, c.q_head_dim_strided ? std::vector<std::string>{"", "", "", "s0"} : std::vector<std::string>{"", "s0", "", ""});
  int kn = g.input(Host{DType::f32, {1, t0, k_heads, c.d}, std::vector<double>(t0 * k_heads * c.d)}, Layout::contiguous, {"", "s0", "", ""});
  int vn = g.input(Host{DType::f32, {1, c.hkv, t0, c.dv}, std::vector<double>(c.hkv * t0 * c.dv)}, Layout::contiguous, {"", "", "s0", ""});
  int qt = c.q_head_dim_strided ? g.op("aten.transpose.int", {R(qn), I(-1), I(-2)}, DType::f32, {1, c.hq, t0, c.d})
                                : g.op("aten.transpose.int", {R(qn), I(1), I(2)}, DType::f32, {1, c.hq, t0, c.d});
  int kt = g.op("aten.transpose.int", {R(kn), I(1), I(2)}, DType::f32, {1, k_heads, t0, c.d});
  if (c.k_head_broadcast) kt = g.op("aten.expand.default", {R(kt), Ints({1, c.hkv, -1, c.d}), B(false)}, DType::f32, {1, c.hkv, t0, c.d});
  Arg sink_arg = None();
  if (c.sinks) sink_arg = R(g.param(make_host(DType::f32, {c.hq}, sinks)));
  std::vector<Arg> slopes;
  for (double x : c.alibi) slopes.push_back(F(x));
  int att = g.op("fuselm.attention.default", {R(qt), R(kt), R(vn), sink_arg, F(c.scale), I(c.window), F(c.softcap), I(c.layer),
                                                   I(c.chunk), S(c.mask), c.alibi.empty() ? None() : L(slopes)},
                 DType::f32, {1, t0, c.hq, c.dv});
  // The module the attention op sits in, as capture records it.
  g.graph().modules.push_back(ir::Module{"model.layers.1.self_attn", "test.Attention", {{"layer_idx", 1}}});
  g.node(att).module_stack = {0, 1};
  g.output(att);
  Executor ex(g.graph(), g.params(), {});

  for (size_t st = 0; st < steps.size(); ++st) {
    SCOPED_TRACE("step " + std::to_string(st));
    int64_t T = 0;
    for (const auto& ch : steps[st]) T += ch.count;
    Host q = c.q_head_dim_strided ? Host{DType::f32, {1, c.hq, c.d, T}, std::vector<double>(c.hq * c.d * T)}
                                  : Host{DType::f32, {1, T, c.hq, c.d}, std::vector<double>(T * c.hq * c.d)};
    Host k{DType::f32, {1, T, k_heads, c.d}, std::vector<double>(T * k_heads * c.d)};
    Host v{DType::f32, {1, c.hkv, T, c.dv}, std::vector<double>(c.hkv * T * c.dv)};
    Host want{DType::f32, {1, T, c.hq, c.dv}, std::vector<double>(T * c.hq * c.dv)};
    std::vector<SequenceSlice> slices;
    int64_t t = 0;
    for (const auto& ch : steps[st]) {
      const SeqData& s = seqs[ch.seq];
      ASSERT_EQ(ctx[ch.seq], ch.first);
      ctx[ch.seq] += ch.count;
      ASSERT_TRUE(seq_kv[ch.seq].reserve(ctx[ch.seq], cache));
      slices.push_back(SequenceSlice{t, ch.count, ctx[ch.seq], seq_kv[ch.seq].slots()});
      for (int64_t i = 0; i < ch.count; ++i, ++t) {
        const int64_t pos = ch.first + i;
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t e = 0; e < c.d; ++e) {
            const double x = s.q[pos][h * c.d + e];
            if (c.q_head_dim_strided) q.v[(h * c.d + e) * T + t] = x;
            else q.v[(t * c.hq + h) * c.d + e] = x;
          }
        for (int64_t h = 0; h < c.hkv; ++h) {
          if (h < k_heads)
            for (int64_t e = 0; e < c.d; ++e) k.v[(t * k_heads + h) * c.d + e] = s.k[pos][h * c.d + e];
          for (int64_t e = 0; e < c.dv; ++e) v.v[(h * T + t) * c.dv + e] = s.v[pos][h * c.dv + e];
        }
        for (int64_t h = 0; h < c.hq; ++h) {
          auto o = attend_ref(c, s, pos, h, sinks);
          for (int64_t e = 0; e < c.dv; ++e) want.v[(t * c.hq + h) * c.dv + e] = o[e];
        }
      }
    }
    Storage qs = encode(q), ks = encode(k), vs = encode(v);
    std::vector<Tensor> in = {qs.tensor(), ks.tensor(), vs.tensor()};
    Batch batch{slices, &cache};
    try {
      expect_close(read(ex.run(in, batch)), want, 1e-4, 1e-5);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
  // The other layer's cache stays untouched.
  for (int64_t i = 0; i < int64_t{num_blocks} * block_size * c.hkv * c.d; ++i)
    if (!std::isnan(cache.k(1 - c.layer)[i])) {
      ADD_FAILURE() << "layer " << 1 - c.layer << " K cache was written at " << i;
      break;
    }
}

void add_attention_cases(Cases& m) {
  m["fuselm.attention.default"] = [] {
    AttnConfig c;
    c.window = 3;
    c.softcap = 5.0;
    c.sinks = true;
    c.dv = 6;
    check_attention(c);
    // ALiBi slopes (bloom's 2^(-8(h+1)/H), one steep), alone, with GQA and a window
    for (int64_t hkv : {4, 2}) {
      AttnConfig a;
      a.hkv = hkv;
      a.alibi = {0.9, 0.25, 0.0625, 0.015625};
      check_attention(a);
      a.window = 3;
      check_attention(a);
    }
  };
}

// ---- ops the fusers insert ------------------------------------------------------------------

void add_fused_cases(Cases& m) {
  m["fuselm.rms_norm.default"] = [] {
    const std::string op = "fuselm.rms_norm.default";
    // y = x * rsqrt(mean(x^2, -1) + eps) * (w + offset), as dtype `out`.
    auto ref = [](const Host& x, const Host* w, double eps, double offset, DType out) {
      const int64_t width = x.shape.back();
      Host y{out, x.shape, std::vector<double>(x.numel())};
      for (int64_t r = 0; r < x.numel() / width; ++r) {
        double ss = 0;
        for (int64_t k = 0; k < width; ++k) ss += x.v[r * width + k] * x.v[r * width + k];
        const double inv = 1.0 / std::sqrt(ss / width + eps);
        for (int64_t k = 0; k < width; ++k)
          y.v[r * width + k] = as_dtype(out, x.v[r * width + k] * inv * (w ? w->v[k] + offset : 1.0));
      }
      return y;
    };
    Host x = rand_host(DType::f32, {2, 3, 16}, 501, -3, 3);
    for (DType wd : {DType::f32, DType::bf16}) {
      for (double offset : {0.0, 1.0}) {
        Host w = rand_host(wd, {16}, 502);
        OpGraph g;
        int xn = g.input(x, Layout::transposed), wn = g.param(w);
        g.output(g.op(op, {R(xn), R(wn), F(1e-6), F(offset)}, DType::f32, x.shape));
        expect_close(g.run(), ref(x, &w, 1e-6, offset, DType::f32), 1e-5, 1e-6,
                     std::string(ir::dtype_name(wd)) + " weight, offset " + std::to_string(offset));
      }
    }
    check_op(op, {{x, Layout::strided}}, [](auto n) { return std::vector<Arg>{R(n[0]), None(), F(1e-5), F(0.0)}; },
             ref(x, nullptr, 1e-5, 0.0, DType::f32), "no weight, strided", 1e-5, 1e-6);
    Host xb = rand_host(DType::bf16, {4, 8}, 503, -3, 3);
    check_op(op, {{xb}}, [](auto n) { return std::vector<Arg>{R(n[0]), None(), F(0.1), F(0.0)}; },
             ref(xb, nullptr, 0.1, 0.0, DType::bf16), "bf16 in and out", 1.0 / 128, 0);
  };
  m["fuselm.act_and_mul.default"] = [] {
    const std::string op = "fuselm.act_and_mul.default";
    auto ref = [](const Host& gu, const std::function<double(double)>& act) {
      const int64_t n2 = gu.shape.back(), n = n2 / 2;
      Host y{DType::f32, gu.shape, {}};
      y.shape.back() = n;
      for (int64_t r = 0; r < gu.numel() / n2; ++r)
        for (int64_t k = 0; k < n; ++k) y.v.push_back(as_dtype(DType::f32, act(gu.v[r * n2 + k]) * gu.v[r * n2 + n + k]));
      return y;
    };
    const std::vector<std::pair<std::string, std::function<double(double)>>> acts = {
        {"silu", [](double x) { return x / (1.0 + std::exp(-x)); }}, {"gelu", gelu_ref}, {"gelu_tanh", gelu_tanh_ref}};
    Host gu = rand_host(DType::f32, {2, 3, 20}, 511, -5, 5);
    Host one = rand_host(DType::f32, {1, 1, 64}, 512, -5, 5);
    for (const auto& [name, f] : acts) {
      auto args = [name = name](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), S(name)}; };
      check_op(op, {{gu, Layout::transposed}}, args, ref(gu, f), name + " transposed", 1e-5, 1e-6);
      check_op(op, {{gu, Layout::strided}}, args, ref(gu, f), name + " strided", 1e-5, 1e-6);
      check_op(op, {{one}}, args, ref(one, f), name + " one token", 1e-5, 1e-6);
    }
    EXPECT_CONTAINS(run_error(op, {{gu}}, [](auto n) { return std::vector<Arg>{R(n[0]), S("relu6")}; }, DType::f32, {2, 3, 10}), "relu6");
  };
  // y = x*cos + rotate(x)*sin, rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]) (transformers), or the
  // interleaved rotate_every_two (GPT-J): rotate(x)[2j] = -x[2j+1], rotate(x)[2j+1] = x[2j];
  // with cos/sin [1, 1, T, d] broadcast over the heads of x [1, H, T, d].
  m["fuselm.rope.default"] = [] {
    const std::string op = "fuselm.rope.default";
    auto ref = [](const Host& x, const Host& c, const Host& s, bool interleaved = false) {
      const int64_t d = x.shape.back(), h = d / 2, t = x.shape[2];
      Host y{DType::f32, x.shape, std::vector<double>(x.numel())};
      for (int64_t r = 0; r < x.numel() / d; ++r) {
        const int64_t cr = r % t;  // the row of cos/sin: same position, any head
        for (int64_t i = 0; i < d; ++i) {
          const double rot = interleaved ? (i % 2 ? x.v[r * d + i - 1] : -x.v[r * d + i + 1])
                                         : (i < h ? -x.v[r * d + i + h] : x.v[r * d + i - h]);
          y.v[r * d + i] = as_dtype(DType::f32, as_dtype(DType::f32, x.v[r * d + i] * c.v[cr * d + i]) +
                                                      as_dtype(DType::f32, rot * s.v[cr * d + i]));
        }
      }
      return y;
    };
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2]), S("half")}; };
    for (int64_t d : {2, 8, 18, 64}) {
      Host x = rand_host(DType::f32, {1, 3, 5, d}, 515, -3, 3);
      Host c = rand_host(DType::f32, {1, 1, 5, d}, 516, -1, 1), s = rand_host(DType::f32, {1, 1, 5, d}, 517, -1, 1);
      const std::string w = " d=" + std::to_string(d);
      check_op(op, {{x}, {c}, {s}}, args, ref(x, c, s), "contiguous" + w, 1e-6, 1e-7);
      check_op(op, {{x, Layout::transposed}, {c}, {s, Layout::strided}}, args, ref(x, c, s), "transposed x" + w, 1e-6, 1e-7);
      check_op(op, {{x, Layout::strided}, {c, Layout::transposed}, {s}}, args, ref(x, c, s), "strided x" + w, 1e-6, 1e-7);
      auto iargs = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2]), S("interleaved")}; };
      check_op(op, {{x}, {c}, {s}}, iargs, ref(x, c, s, true), "interleaved" + w, 1e-6, 1e-7);
      check_op(op, {{x, Layout::transposed}, {c, Layout::strided}, {s}}, iargs, ref(x, c, s, true), "interleaved transposed x" + w, 1e-6, 1e-7);
    }
    Host x = rand_host(DType::f32, {1, 2, 3, 8}, 518), c = rand_host(DType::f32, {1, 1, 3, 8}, 519);
    Host odd = rand_host(DType::f32, {1, 2, 3, 7}, 520), c7 = rand_host(DType::f32, {1, 1, 3, 7}, 521);
    Host wide = rand_host(DType::f32, {1, 4, 3, 8}, 522), bf = rand_host(DType::bf16, {1, 2, 3, 8}, 523);
    EXPECT_CONTAINS(run_error(op, {{odd}, {c7}, {c7}}, args, DType::f32, {1, 2, 3, 7}), "not even");
    EXPECT_CONTAINS(run_error(op, {{x}, {wide}, {c}}, args, DType::f32, {1, 2, 3, 8}), "broadcast");
    Host one_head = rand_host(DType::f32, {1, 1, 3, 8}, 524);  // cos [1, 2, 3, 8] would grow x
    EXPECT_CONTAINS(run_error(op, {{one_head}, {x}, {c}}, args, DType::f32, {1, 1, 3, 8}), "does not broadcast to");
    EXPECT_CONTAINS(run_error(op, {{bf}, {c}, {c}}, args, DType::f32, {1, 2, 3, 8}), "f32 only");
    EXPECT_CONTAINS(run_error(op, {{x}, {c}, {c}}, [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), R(n[2]), S("every_two")}; },
                              DType::f32, {1, 2, 3, 8}), "pairing 'every_two'");
  };
  // y = cap · tanh(x / cap), bit for bit what the unfused aten.div, aten.tanh and aten.mul give (the
  // fused op runs their kernels block by block): contiguous (one block, many blocks and threads
  // with a ragged tail), transposed and strided x; and c·tanh(x/c) in double within rounding.
  m["fuselm.softcap.default"] = [] {
    const std::string op = "fuselm.softcap.default";
    auto unfused = [](const Host& x, Layout layout, double cap) {
      OpGraph g;
      const int xn = g.input(x, layout);
      const int d = g.op("aten.div.Tensor", {R(xn), F(cap)}, DType::f32, x.shape);
      const int t = g.op("aten.tanh.default", {R(d)}, DType::f32, x.shape);
      g.output(g.op("aten.mul.Tensor", {R(t), F(cap)}, DType::f32, x.shape));
      return g.run();
    };
    for (const auto& [shape, cap] : {std::pair{std::vector<int64_t>{2, 3, 20}, 30.0},
                                     std::pair{std::vector<int64_t>{1, 1, 70001}, 30.0},
                                     std::pair{std::vector<int64_t>{3, 5, 9001}, 50.0}}) {
      Host x = rand_host(DType::f32, shape, 531, -150, 150);
      Host want{DType::f32, x.shape, std::vector<double>(x.numel())};
      for (int64_t i = 0; i < x.numel(); ++i) want.v[i] = cap * std::tanh(x.v[i] / cap);
      auto args = [cap = cap](const std::vector<int>& n) { return std::vector<Arg>{R(n[0]), F(cap)}; };
      const std::string w = " n=" + std::to_string(x.numel());
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        check_op(op, {{x, layout}}, args, unfused(x, layout, cap), "bit-identical to div, tanh, mul" + w, 0, 0);
        check_op(op, {{x, layout}}, args, want, "c·tanh(x/c)" + w, 1e-5, 1e-5);
      }
    }
    Host bf = rand_host(DType::bf16, {2, 8}, 532);
    EXPECT_CONTAINS(run_error(op, {{bf}}, [](auto n) { return std::vector<Arg>{R(n[0]), F(30.0)}; }, DType::f32, {2, 8}),
                    "f32 only");
  };
  // One process (a single-process communicator): the sum over one rank is the input; the MPI sum is
  // tested under mpirun (tests/python/test_tensor_parallel.py).
  m["fuselm.all_reduce.default"] = [] {
    const std::string op = "fuselm.all_reduce.default";
    Host x = rand_host(DType::f32, {1, 5, 12}, 513, -3, 3);
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0])}; };
    check_op(op, {{x}}, args, x, "one rank", 0, 0);
    EXPECT_CONTAINS(run_error(op, {{x, Layout::transposed}}, args, DType::f32, {1, 5, 12}), "non-contiguous");
  };
  // One process: the gather of one rank's columns is the input.
  m["fuselm.all_gather.default"] = [] {
    const std::string op = "fuselm.all_gather.default";
    Host x = rand_host(DType::f32, {1, 3, 10}, 514, -3, 3);
    auto args = [](const std::vector<int>& n) { return std::vector<Arg>{R(n[0])}; };
    check_op(op, {{x}}, args, x, "one rank", 0, 0);
    EXPECT_CONTAINS(run_error(op, {{x, Layout::transposed}}, args, DType::f32, {1, 3, 10}), "non-contiguous");
  };
  // A vocab-parallel slice: rows [first, first + V) of the full table; other ids give zero rows.
  m["fuselm.vocab_embedding.default"] = [] {
    const std::string op = "fuselm.vocab_embedding.default";
    Host w = rand_host(DType::f32, {4, 6}, 515);
    Host idx = make_host(DType::i64, {2, 3}, {0, 3, 4, 6, 7, 9});
    Host want{DType::f32, {2, 3, 6}, {}};
    for (double id : idx.v)
      for (int64_t h = 0; h < 6; ++h) want.v.push_back(id >= 3 && id < 7 ? w.v[(static_cast<int64_t>(id) - 3) * 6 + h] : 0.0);
    OpGraph g;
    int wn = g.param(w), in = g.input(idx, Layout::transposed);
    g.output(g.op(op, {R(wn), R(in), I(3)}, DType::f32, {2, 3, 6}));
    expect_close(g.run(), want, 0, 0, "rows 3..6 of 10");
  };
  // One process: the all-reduced sum of squares is the local one, the mean is over `width` (the
  // global width, here twice the local one, as if the other rank's columns were zero).
  m["fuselm.rms_norm_split.default"] = [] {
    const std::string op = "fuselm.rms_norm_split.default";
    Host x = rand_host(DType::f32, {2, 3, 8}, 516, -3, 3);
    Host w = rand_host(DType::f32, {8}, 517);
    for (int64_t width : {8, 16})
      for (double offset : {0.0, 1.0}) {
        Host want{DType::f32, x.shape, std::vector<double>(x.numel())};
        for (int64_t r = 0; r < 6; ++r) {
          double ss = 0;
          for (int64_t k = 0; k < 8; ++k) ss += x.v[r * 8 + k] * x.v[r * 8 + k];
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(width) + 1e-6);
          for (int64_t k = 0; k < 8; ++k) want.v[r * 8 + k] = x.v[r * 8 + k] * inv * (w.v[k] + offset);
        }
        OpGraph g;
        int xn = g.input(x, Layout::strided), wn = g.param(w);
        g.output(g.op(op, {R(xn), R(wn), F(1e-6), F(offset), I(width)}, DType::f32, x.shape));
        expect_close(g.run(), want, 1e-5, 1e-6, "width " + std::to_string(width) + ", offset " + std::to_string(offset));
      }
  };
}

// fuselm.select_rows (select_rows_op.cc, inserted by the engine before the LM head): the rows
// Batch::logit_rows lists, in that order; every row when the batch selects none.
void add_select_rows_cases(Cases& m) {
  m["fuselm.select_rows.default"] = [] {
    const std::string op = "fuselm.select_rows.default";
    Host x = rand_host(DType::f32, {1, 5, 6}, 521);
    check_op(op, {{x, Layout::transposed}}, [](auto n) { return std::vector<Arg>{R(n[0])}; }, x, "no selection");
    const std::vector<int64_t> rows = {4, 0, 2, 2};
    Host want{DType::f32, {1, 4, 6}, {}};
    for (int64_t r : rows)
      for (int64_t k = 0; k < 6; ++k) want.v.push_back(x.v[r * 6 + k]);
    for (Layout layout : {Layout::contiguous, Layout::transposed}) {
      OpGraph g;
      g.output(g.op(op, {R(g.input(x, layout))}, DType::f32, {1, 4, 6}));
      Batch b;
      b.select_rows = true;
      b.logit_rows = rows;
      expect_close(g.run(b), want, 0, 0, "rows 4, 0, 2, 2");
    }
    OpGraph g;
    g.output(g.op(op, {R(g.input(x))}, DType::f32, {1, 1, 6}));
    const std::vector<int64_t> bad = {5};
    Batch b;
    b.select_rows = true;
    b.logit_rows = bad;
    try {
      g.run(b);
      ADD_FAILURE() << "a row outside the batch was selected";
    } catch (const std::exception& e) {
      EXPECT_CONTAINS(std::string(e.what()), "outside the batch of 5 tokens");
    }
  };
}

// ---------------------------------------------------------------------------------------------
// Mutations (mutation_ops.cc): MLA's key assembly, new_empty + copy_ into two slices of it.

void add_mutation_cases(Cases& m) {
  m["aten.new_empty.default"] = [] {
    Host x = rand_host(DType::f32, {2, 3}, 601);
    OpGraph g;
    int n = g.input(x);
    g.output(g.op("aten.new_empty.default", {R(n), Ints({3, 4}), None(), None(), None(), B(false)}, DType::f32, {3, 4}));
    expect_close(g.run(), make_host(DType::f32, {3, 4}, std::vector<double>(12, 0.0)), 0, 0, "zero-filled");
  };
  m["aten.copy_.default"] = [] {
    // key [2, 3, 8] = cat(k_nope [2, 3, 5] (transposed view), k_rot [2, 1, 3] broadcast over dim 1).
    Host nope = rand_host(DType::f32, {2, 3, 5}, 602), rot = rand_host(DType::f32, {2, 1, 3}, 603);
    OpGraph g;
    int a = g.input(nope, Layout::transposed), b = g.input(rot);
    int key = g.op("aten.new_empty.default", {R(a), Ints({2, 3, 8}), None(), None(), None(), B(false)}, DType::f32, {2, 3, 8});
    int s1 = g.op("aten.slice.Tensor", {R(key), I(2), I(0), I(5), I(1)}, DType::f32, {2, 3, 5});
    g.op("aten.copy_.default", {R(s1), R(a), B(false)}, DType::f32, {2, 3, 5});
    int s2 = g.op("aten.slice.Tensor", {R(key), I(2), I(5), I(kInt64Max), I(1)}, DType::f32, {2, 3, 3});
    g.op("aten.copy_.default", {R(s2), R(b), B(false)}, DType::f32, {2, 3, 3});
    g.output(key);
    Host want{DType::f32, {2, 3, 8}, {}};
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 8; ++k) want.v.push_back(k < 5 ? at(nope, {i, j, k}) : at(rot, {i, 0, k - 5}));
    expect_close(g.run(), want, 0, 0, "written through both slices into the base");
    EXPECT_CONTAINS(run_error("aten.copy_.default", {{rand_host(DType::f32, {2, 3}, 604)}, {rand_host(DType::f32, {4, 3}, 605)}},
                              [](auto n) { return std::vector<Arg>{R(n[0]), R(n[1]), B(false)}; }, DType::f32, {2, 3}),
                    "does not broadcast");
  };
}

// fuselm.mla_attention against expanded attention: per head k_j = [W_k·c_j | k_rot_j],
// v_j = W_v·c_j, then eager softmax attention; two sequences over two steps (prefill, then a
// decode and a long prefill continuation) on a latent cache of R + Dr values per slot. With a bf16
// cache the latent and rope rows are drawn bf16-representable, with a q8_0 cache as the values
// their q8_0 blocks hold (the latent and the rope key quantized apart, kernels_testing.h), so the
// stored rows are exact and the result is the same.
void check_mla(kv::KvDType cache_dtype) {
  SCOPED_TRACE(std::string("cache ") + kv::kv_dtype_name(cache_dtype));
  const int64_t H = 3, Dn = 4, Dr = 2, Dv = 5, Rk = 6;
  const double scale = 0.4;
  const int64_t lens[2] = {24, 3};
  std::vector<Host> qs, lats, rots;
  for (int s = 0; s < 2; ++s) {
    qs.push_back(rand_host(DType::f32, {lens[s], H, Dn + Dr}, 701 + s, -1, 1));
    lats.push_back(rand_host(DType::f32, {lens[s], Rk}, 711 + s, -1, 1));
    rots.push_back(rand_host(DType::f32, {lens[s], Dr}, 721 + s, -1, 1));
    if (cache_dtype == kv::KvDType::bf16)
      for (Host* h : {&lats.back(), &rots.back()})
        for (double& x : h->v) x = as_dtype(DType::bf16, x);
    if (cache_dtype == kv::KvDType::q8_0)
      for (auto [h, n] : {std::pair{&lats.back(), Rk}, std::pair{&rots.back(), Dr}})
        for (int64_t i = 0; i < lens[s]; ++i) {  // per token row: the values its blocks hold
          std::vector<float> row(h->v.begin() + i * n, h->v.begin() + (i + 1) * n);
          std::vector<uint8_t> blocks(static_cast<size_t>(kernels::testing::q8_0_blocks(n) * 34));
          kernels::testing::quantize_q8_0_padded(row.data(), n, blocks.data());
          const auto held = kernels::testing::dequantize_q8_0(blocks.data(), n);
          std::copy(held.begin(), held.end(), h->v.begin() + i * n);
        }
  }
  Host w = rand_host(DType::f32, {H * (Dn + Dv), Rk}, 731, -0.7, 0.7);
  auto wrow = [&](int64_t row, int64_t r) { return w.v[row * Rk + r]; };
  auto ref = [&](int s, int64_t pos, int64_t h, int64_t e) {
    std::vector<double> logits;
    for (int64_t j = 0; j <= pos; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < Dn; ++d) {
        double k = 0;
        for (int64_t r = 0; r < Rk; ++r) k += wrow(h * (Dn + Dv) + d, r) * lats[s].v[j * Rk + r];
        dot += qs[s].v[(pos * H + h) * (Dn + Dr) + d] * k;
      }
      for (int64_t d = 0; d < Dr; ++d) dot += qs[s].v[(pos * H + h) * (Dn + Dr) + Dn + d] * rots[s].v[j * Dr + d];
      logits.push_back(dot * scale);
    }
    double m = -kInf, z = 0, out = 0;
    for (double l : logits) m = std::max(m, l);
    for (double l : logits) z += std::exp(l - m);
    for (int64_t j = 0; j <= pos; ++j) {
      double v = 0;
      for (int64_t r = 0; r < Rk; ++r) v += wrow(h * (Dn + Dv) + Dn + e, r) * lats[s].v[j * Rk + r];
      out += std::exp(logits[j] - m) / z * v;
    }
    return out;
  };
  // Step 2's 19-token chunk takes the expanded form (t·(2R+Dr-Dn-Dr-Dv) > (Dn+Dv)·R), the others
  // the absorbed one.
  std::vector<std::vector<Chunk>> steps = {{{0, 0, 5}, {1, 0, 2}}, {{1, 2, 1}, {0, 5, 19}}};
  kv::PagedKvCache cache({kv::LayerShape{Rk + Dr, 0, Rk, 0, true}}, 16, 2, cache_dtype);
  if (cache_dtype == kv::KvDType::bf16) std::fill_n(cache.k_bf16(0), 32 * (Rk + Dr), uint16_t{0x7fc0});  // bf16 NaN
  else if (cache_dtype == kv::KvDType::q8_0) std::memset(cache.k_q8_0(0), 0xff, 32 * 2 * 34);  // fp16 NaN scales
  else std::fill_n(cache.k(0), 32 * (Rk + Dr), NAN);  // never-written slots must not be read
  std::vector<kv::SequenceKv> seq_kv(2);
  std::vector<int64_t> ctx(2, 0);

  OpGraph g;
  const int64_t t0 = 7;
  int qn = g.input(Host{DType::f32, {1, t0, H, Dn + Dr}, std::vector<double>(t0 * H * (Dn + Dr))}, Layout::contiguous, {"", "s0", "", ""});
  int ln = g.input(Host{DType::f32, {1, 1, t0, Rk}, std::vector<double>(t0 * Rk)}, Layout::contiguous, {"", "", "s0", ""});
  int rn = g.input(Host{DType::f32, {1, 1, t0, Dr}, std::vector<double>(t0 * Dr)}, Layout::contiguous, {"", "", "s0", ""});
  int qt = g.op("aten.transpose.int", {R(qn), I(1), I(2)}, DType::f32, {1, H, t0, Dn + Dr});
  int wn = g.param(w);
  int att = g.op("fuselm.mla_attention.default", {R(qt), R(ln), R(rn), R(wn), F(scale), I(0), I(Dn), I(Dv)}, DType::f32,
                 {1, t0, H, Dv});
  g.output(att);
  Executor ex(g.graph(), g.params(), {});
  for (size_t st = 0; st < steps.size(); ++st) {
    SCOPED_TRACE("mla step " + std::to_string(st));
    int64_t T = 0;
    for (const auto& ch : steps[st]) T += ch.count;
    Host q{DType::f32, {1, T, H, Dn + Dr}, {}}, lat{DType::f32, {1, 1, T, Rk}, {}}, rot{DType::f32, {1, 1, T, Dr}, {}};
    Host want{DType::f32, {1, T, H, Dv}, {}};
    std::vector<SequenceSlice> slices;
    int64_t t = 0;
    for (const auto& ch : steps[st]) {
      ctx[ch.seq] += ch.count;
      ASSERT_TRUE(seq_kv[ch.seq].reserve(ctx[ch.seq], cache));
      slices.push_back(SequenceSlice{t, ch.count, ctx[ch.seq], seq_kv[ch.seq].slots()});
      for (int64_t i = 0; i < ch.count; ++i, ++t) {
        const int64_t pos = ch.first + i;
        const int s = ch.seq;
        q.v.insert(q.v.end(), qs[s].v.begin() + pos * H * (Dn + Dr), qs[s].v.begin() + (pos + 1) * H * (Dn + Dr));
        lat.v.insert(lat.v.end(), lats[s].v.begin() + pos * Rk, lats[s].v.begin() + (pos + 1) * Rk);
        rot.v.insert(rot.v.end(), rots[s].v.begin() + pos * Dr, rots[s].v.begin() + (pos + 1) * Dr);
        for (int64_t h = 0; h < H; ++h)
          for (int64_t e = 0; e < Dv; ++e) want.v.push_back(ref(s, pos, h, e));
      }
    }
    Storage qst = encode(q), lst = encode(lat), rst = encode(rot);
    std::vector<Tensor> in = {qst.tensor(), lst.tensor(), rst.tensor()};
    Batch batch{slices, &cache};
    try {
      expect_close(read(ex.run(in, batch)), want, 1e-4, 1e-5);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

void add_mla_cases(Cases& m) {
  m["fuselm.mla_attention.default"] = [] {
    check_mla(kv::KvDType::f32);
    check_mla(kv::KvDType::bf16);
    check_mla(kv::KvDType::q8_0);
  };
}

// ---------------------------------------------------------------------------------------------
// Complex numbers (complex_ops.cc), as DeepseekV2's rope uses them: read back through view_as_real.

// DeepseekV2's apply_rotary_emb: view_as_real(view_as_complex(x.reshape(..., -1, 2)) · polar(s, θ)).
void check_complex_rope() {
  const int64_t heads = 2, T = 3, D = 4;
  Host x = rand_host(DType::f32, {1, heads, T, D}, 801);
  Host theta = rand_host(DType::f32, {1, T, D / 2}, 802, -3, 3);
  Host mag = rand_host(DType::f32, {1, T, D / 2}, 803, 0.5, 1.5);
  OpGraph g;
  int xn = g.input(x), tn = g.input(theta), mn = g.input(mag);
  int fc = g.op("aten.polar.default", {R(mn), R(tn)}, DType::c64, {1, T, D / 2});
  int fs = g.op("aten.mul.Tensor", {R(fc), F(0.5)}, DType::c64, {1, T, D / 2});
  int fu = g.op("aten.unsqueeze.default", {R(fs), I(1)}, DType::c64, {1, 1, T, D / 2});
  int xr = g.op("aten.reshape.default", {R(xn), Ints({1, heads, T, -1, 2})}, DType::f32, {1, heads, T, D / 2, 2});
  int xc = g.op("aten.view_as_complex.default", {R(xr)}, DType::c64, {1, heads, T, D / 2});
  int prod = g.op("aten.mul.Tensor", {R(xc), R(fu)}, DType::c64, {1, heads, T, D / 2});
  int re = g.op("aten.view_as_real.default", {R(prod)}, DType::f32, {1, heads, T, D / 2, 2});
  g.output(g.op("aten.flatten.using_ints", {R(re), I(3), I(-1)}, DType::f32, {1, heads, T, D}));
  Host want{DType::f32, {1, heads, T, D}, std::vector<double>(heads * T * D)};
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < D / 2; ++k) {
        const double a = at(x, {0, h, t, 2 * k}), b = at(x, {0, h, t, 2 * k + 1});
        const double r = 0.5 * at(mag, {0, t, k}), th = at(theta, {0, t, k});
        want.v[((h * T) + t) * D + 2 * k] = a * r * std::cos(th) - b * r * std::sin(th);
        want.v[((h * T) + t) * D + 2 * k + 1] = a * r * std::sin(th) + b * r * std::cos(th);
      }
  expect_close(g.run(), want, 1e-5, 1e-6, "complex rope");
}

void add_complex_cases(Cases& m) {
  m["aten.polar.default"] = [] { check_complex_rope(); };
  m["aten.view_as_complex.default"] = [] {
    check_complex_rope();
    // a pair that is not contiguous (a transposed input) is copied, not misread
    Host x = rand_host(DType::f32, {2, 3}, 804);
    OpGraph g;
    int xn = g.input(x);
    int xt = g.op("aten.transpose.int", {R(xn), I(0), I(1)}, DType::f32, {3, 2});
    int z = g.op("aten.view_as_complex.default", {R(xt)}, DType::c64, {3});
    g.output(g.op("aten.view_as_real.default", {R(z)}, DType::f32, {3, 2}));
    expect_close(g.run(), transpose_ref(x, 0, 1), 0, 0, "transposed pairs");
  };
  m["aten.view_as_real.default"] = [] { check_complex_rope(); };
}

// ---------------------------------------------------------------------------------------------

const Cases& op_cases() {
  static const Cases cases = [] {
    Cases m;
    add_binary_cases(m);
    add_unary_cases(m);
    add_reduction_cases(m);
    add_product_cases(m);
    add_view_cases(m);
    add_misc_cases(m);
    add_scalar_cases(m);
    add_attention_cases(m);
    add_fused_cases(m);
    add_select_rows_cases(m);
    add_mutation_cases(m);
    add_mla_cases(m);
    add_complex_cases(m);
    add_router_cases(m);
    add_core_aten_cases(m);
    add_recurrent_cases(m);
    return m;
  }();
  return cases;
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (const auto& [k, f] : op_cases()) v.push_back(k);
  return v;
}

class RuntimeOp : public ::testing::TestWithParam<std::string> {};

TEST_P(RuntimeOp, MatchesReference) {
  const std::string& op = GetParam();
  if (!OpRegistry::builtin().find(op)) GTEST_SKIP() << op << " is not registered in this build";
  exercised_ops().clear();
  op_cases().at(op)();
  EXPECT_TRUE(exercised_ops().count(op)) << "the case for " << op << " never ran it";
}

INSTANTIATE_TEST_SUITE_P(RuntimeOps, RuntimeOp, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(RuntimeOps, EveryRegisteredOpHasACase) {
  const auto registered = OpRegistry::builtin().names();
  size_t covered = 0;
  for (const auto& op : registered) {
    EXPECT_TRUE(op_cases().count(op)) << "op " << op << " has no test case in runtime_ops_test.cc";
    covered += op_cases().count(op);
  }
  std::cout << "[ op coverage ] " << covered << " of " << registered.size() << " registered ops have a case\n";
}

TEST(RuntimeOps, UnknownOpFailsAtExecutorConstructionNamingOpAndModule) {
  OpGraph g;
  int x = g.input(rand_host(DType::f32, {2, 3}, 401));
  g.graph().modules.push_back(ir::Module{"model", "test.Model", nlohmann::json::object()});
  g.graph().modules.push_back(ir::Module{"model.layers.3.mlp", "test.Mlp", nlohmann::json::object()});
  int y = g.op("aten.relu.default", {R(x)}, DType::f32, {2, 3});
  int z = g.op("aten.frobnicate.default", {R(y), I(2)}, DType::f32, {2, 3});
  g.node(z).module_stack = {0, 1, 2};
  g.output(z);
  try {
    Executor ex(g.graph(), {}, {});
    FAIL() << "Executor accepted an op the registry lacks";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "aten.frobnicate.default");
    EXPECT_CONTAINS(e.what(), "model.layers.3.mlp");
  }
}

TEST(RuntimeOps, MissingParameterFailsAtExecutorConstruction) {
  OpGraph g;
  int x = g.input(rand_host(DType::f32, {2, 3}, 402));
  g.output(g.op("aten.relu.default", {R(x)}, DType::f32, {2, 3}));
  ir::Node p;
  p.index = static_cast<int>(g.graph().nodes.size());
  p.name = "w";
  p.op = "placeholder";
  p.placeholder_kind = "parameter";
  p.target = "model.embed_tokens.weight";
  g.graph().nodes.push_back(p);
  try {
    Executor ex(g.graph(), {}, {});
    FAIL() << "no error for a parameter without a tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "model.embed_tokens.weight");
  }
}

TEST(RuntimeOps, OpErrorsNameOpAndModule) {
  OpGraph g;
  int x = g.input(rand_host(DType::f32, {2, 3}, 403), Layout::transposed);
  g.graph().modules.push_back(ir::Module{"model.norm", "test.Norm", nlohmann::json::object()});
  int y = g.op("aten.view.default", {R(x), Ints({6})}, DType::f32, {6});
  g.node(y).module_stack = {0, 1};
  g.output(y);
  try {
    g.run();
    FAIL() << "view of a transposed tensor did not fail";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "aten.view.default");
    EXPECT_CONTAINS(e.what(), "model.norm");
  }
}

// Shapes follow the inputs from run to run: one executor, symbolic sizes rebound each time.
TEST(RuntimeOps, SymbolicSizesFollowEachRun) {
  OpGraph g;
  Host x0 = rand_host(DType::f32, {1, 3, 4}, 404);
  int x = g.input(x0, Layout::contiguous, {"", "s0", ""});
  int v = g.op("aten.view.default", {R(x), L({Sym("s0"), I(2), I(2)})}, DType::f32, {3, 2, 2});
  int s = g.op("aten.sum.dim_IntList", {R(v), Ints({-1}), B(false), None()}, DType::f32, {3, 2});
  int n = g.op("aten.mul.Scalar", {R(s), Sym("2*s0 + 1")}, DType::f32, {3, 2});
  g.output(n);
  Executor ex(g.graph(), {}, {});
  for (int64_t T : {3, 5, 1}) {
    Host xin = rand_host(DType::f32, {1, T, 4}, 405 + T);
    Storage st = encode(xin);
    std::vector<Tensor> in = {st.tensor()};
    Host got = read(ex.run(in, {}));
    Host want{DType::f32, {T, 2}, std::vector<double>(T * 2)};
    for (int64_t i = 0; i < T * 2; ++i) want.v[i] = as_dtype(DType::f32, (xin.v[2 * i] + xin.v[2 * i + 1]) * (2 * T + 1));
    expect_close(got, want, 1e-6, 1e-6, "T = " + std::to_string(T));
    EXPECT_EQ(ex.symbols().at("s0"), T);
  }
}

// A view of an early value is read after many same-sized allocations: reference counts must keep
// its buffer out of the free list until the view's last use.
TEST(RuntimeOps, ViewsKeepTheirBufferAlive) {
  OpGraph g;
  Host a = rand_host(DType::f32, {4, 8}, 406);
  int x = g.input(a);
  int y = g.op("aten.mul.Scalar", {R(x), F(2.0)}, DType::f32, {4, 8});       // buffer B
  int yt = g.op("aten.transpose.int", {R(y), I(0), I(1)}, DType::f32, {8, 4});  // view of B; y dies here
  int parts = g.op_list("aten.split.Tensor", {R(yt), I(4), I(0)}, DType::f32, 2);
  int p1 = g.op("getitem", {R(parts), I(1)}, DType::f32, {4, 4});
  int cur = x;
  for (int i = 0; i < 6; ++i) cur = g.op("aten.add.Scalar", {R(cur), F(1.0), I(1)}, DType::f32, {4, 8});  // same size as B
  int back = g.op("aten.slice.Tensor", {R(cur), I(1), I(0), I(4), I(1)}, DType::f32, {4, 4});
  g.output(g.op("aten.add.Tensor", {R(p1), R(back), I(1)}, DType::f32, {4, 4}));
  Host want{DType::f32, {4, 4}, std::vector<double>(16)};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) want.v[i * 4 + j] = as_dtype(DType::f32, 2.0 * a.v[j * 8 + 4 + i] + (a.v[i * 8 + j] + 6.0));
  expect_close(g.run(), want, 1e-6, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// The symbolic shape evaluator.

TEST(SymExpr, EvaluatesSympyForms) {
  const SymbolValues s{{"s0", 7}, {"s1", 3}};
  EXPECT_EQ(eval_sym("s0", s), 7);
  EXPECT_EQ(eval_sym("42", s), 42);
  EXPECT_EQ(eval_sym("2*s0 + 1", s), 15);
  EXPECT_EQ(eval_sym("2*s0 + 3*s1", s), 23);
  EXPECT_EQ(eval_sym("s0 - s1 - 1", s), 3);
  EXPECT_EQ(eval_sym("-s0 + 10", s), 3);
  EXPECT_EQ(eval_sym("s0*s1", s), 21);
  EXPECT_EQ(eval_sym("floor(s0/2)", s), 3);
  EXPECT_EQ(eval_sym("ceiling(s0/2)", s), 4);
  EXPECT_EQ(eval_sym("(s0//2)", s), 3);
  EXPECT_EQ(eval_sym("(s0 + 1)//2", s), 4);
  EXPECT_EQ(eval_sym("FloorDiv(s0, 2)", s), 3);
  EXPECT_EQ(eval_sym("FloorDiv(-s0, 2)", s), -4);
  EXPECT_EQ(eval_sym("Max(1, s0)", s), 7);
  EXPECT_EQ(eval_sym("Max(1, s0 - 10)", s), 1);
  EXPECT_EQ(eval_sym("Max(1, s0, 2*s1 + 2)", s), 8);
  EXPECT_EQ(eval_sym("Min(s0, 4)", s), 4);
  EXPECT_EQ(eval_sym("Mod(s0, 4)", s), 3);
  EXPECT_EQ(eval_sym("PythonMod(-s0, 4)", s), 1);
  EXPECT_EQ(eval_sym("s0**2", s), 49);
  EXPECT_EQ(eval_sym("2*s0**2", s), 98);
  EXPECT_EQ(eval_sym("s1*s0**2 + 1", s), 148);
  EXPECT_EQ(eval_sym("-s1**2", s), -9);
  EXPECT_EQ(eval_sym("2**s1", s), 8);
  EXPECT_EQ(eval_sym("2**s1**2", s), 512);
  EXPECT_EQ(eval_sym("  s0 + s1  ", s), 10);
}

TEST(SymExpr, UnboundSymbolNamesIt) {
  const SymbolValues s{{"s0", 7}};
  try {
    eval_sym("2*s2 + 1", s);
    FAIL() << "an unbound symbol evaluated";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "s2");
    EXPECT_CONTAINS(e.what(), "2*s2 + 1");
  }
}

TEST(SymExpr, RejectsWhatItCannotRead) {
  const SymbolValues s{{"s0", 7}};
  EXPECT_THROW(eval_sym("Foo(s0)", s), std::runtime_error);
  EXPECT_THROW(eval_sym("s0 +", s), std::runtime_error);
  EXPECT_THROW(eval_sym("(s0 + 1", s), std::runtime_error);
  EXPECT_THROW(eval_sym("s0 s0", s), std::runtime_error);
  EXPECT_THROW(eval_sym("", s), std::runtime_error);
}

// ---------------------------------------------------------------------------------------------
// The buffer pool.

TEST(BufferPool, ReusesAReleasedBufferOfTheSameSize) {
  BufferPool pool;
  Buffer* a = pool.acquire(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 64, 0u);
  EXPECT_GE(a->bytes, 1000u);
  EXPECT_EQ(pool.allocations(), 1);
  void* data = a->data;
  pool.release(a);
  Buffer* b = pool.acquire(1000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(b->data, data);
  EXPECT_EQ(pool.allocations(), 1);
  // While b is held, the same request needs a new buffer.
  Buffer* c = pool.acquire(1000);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.allocations(), 2);
  pool.release(b);
  pool.release(c);
  // A somewhat smaller request reuses; a much smaller one does not take a big buffer.
  Buffer* d = pool.acquire(700);
  EXPECT_EQ(pool.allocations(), 2);
  Buffer* e = pool.acquire(64);
  EXPECT_EQ(pool.allocations(), 3);
  EXPECT_NE(e, d);
  pool.release(d);
  pool.release(e);
  Buffer* z = pool.acquire(0);
  EXPECT_NE(z->data, nullptr);
  pool.release(z);
}

// Once one step has run, further steps of the same shape allocate nothing.
TEST(BufferPool, ExecutorAllocatesNothingAfterTheFirstRun) {
  OpGraph g;
  Host x0 = rand_host(DType::f32, {1, 6, 16}, 411);
  int x = g.input(x0, Layout::contiguous, {"", "s0", ""});
  int w = g.param(rand_host(DType::f32, {24, 16}, 412));
  int h = g.op("aten.linear.default", {R(x), R(w), None()}, DType::f32, {1, 6, 24});
  int parts = g.op_list("aten.split_with_sizes.default", {R(h), Ints({16, 8}), I(-1)}, DType::f32, 2);
  int a = g.op("getitem", {R(parts), I(0)}, DType::f32, {1, 6, 16});
  int b = g.op("getitem", {R(parts), I(1)}, DType::f32, {1, 6, 8});
  int sa = g.op("aten.silu.default", {R(a)}, DType::f32, {1, 6, 16});
  int r = g.op("aten.reshape.default", {R(sa), L({I(1), Sym("s0"), I(2), I(8)})}, DType::f32, {1, 6, 2, 8});
  int m = g.op("aten.mul.Tensor", {R(r), R(g.op("aten.unsqueeze.default", {R(b), I(-2)}, DType::f32, {1, 6, 1, 8}))}, DType::f32, {1, 6, 2, 8});
  int t = g.op("aten.transpose.int", {R(m), I(1), I(2)}, DType::f32, {1, 2, 6, 8});
  int c = g.op("aten.contiguous.default", {R(t), I(0)}, DType::f32, {1, 2, 6, 8});
  int sm = g.op("aten.softmax.int", {R(c), I(-1), None()}, DType::f32, {1, 2, 6, 8});
  g.output(g.op("aten.mean.dim", {R(sm), Ints({1}), B(false), None()}, DType::f32, {1, 6, 8}));
  Executor ex(g.graph(), g.params(), {});
  for (int64_t T : {6, 1}) {
    Storage st = encode(rand_host(DType::f32, {1, T, 16}, 413));
    std::vector<Tensor> in = {st.tensor()};
    ex.run(in, {});
    const int64_t after_first = ex.pool().allocations();
    for (int i = 0; i < 3; ++i) {
      ex.run(in, {});
      EXPECT_EQ(ex.pool().allocations(), after_first) << "T = " << T << ", run " << i + 2;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fuselm.attention: causal softmax attention with GQA over a paged cache, against attend_ref.

TEST(Attention, GqaTwoStepsThreeSequences) { check_attention(AttnConfig{}); }

TEST(Attention, SlidingWindowSoftcapSinksDvOtherThanDqk) {
  AttnConfig c;
  c.window = 3;
  c.softcap = 2.0;
  c.sinks = true;
  c.scale = 0.9;  // logits large enough for the softcap to bend them
  c.dv = 5;
  check_attention(c);
}

TEST(Attention, MqaLayerZero) {
  AttnConfig c;
  c.hq = 3;
  c.hkv = 1;
  c.d = c.dv = 4;
  c.layer = 0;
  c.window = 6;
  check_attention(c);
}

TEST(Attention, QueryHeadDimNotUnitStride) {
  AttnConfig c;
  c.q_head_dim_strided = true;
  c.sinks = true;
  check_attention(c);
}

TEST(Attention, ChunkedMask) {
  AttnConfig c;
  c.chunk = 3;
  c.mask = "chunked";
  check_attention(c);
}

// A mask kind the kernel does not run (capture read it from the layer's mask function) is an
// error naming the layer and the kind, never causal attention.
TEST(Attention, MaskTheEngineCannotExpressFails) {
  OpGraph g;
  int q = g.input(rand_host(DType::f32, {1, 2, 3, 4}, 421));
  int k = g.input(rand_host(DType::f32, {1, 1, 3, 4}, 422));
  int v = g.input(rand_host(DType::f32, {1, 1, 3, 4}, 423));
  g.output(g.op("fuselm.attention.default",
                {R(q), R(k), R(v), None(), F(0.5), I(-1), F(0.0), I(4), I(-1), S("bidirectional: query 0 sees key 1")},
                DType::f32, {1, 3, 2, 4}));
  try {
    g.run();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("layer 4: its mask is 'bidirectional: query 0 sees key 1'"), std::string::npos)
        << e.what();
  }
}

TEST(Attention, KeyHeadBroadcastByExpand) {
  AttnConfig c;
  c.k_head_broadcast = true;
  c.window = 4;
  check_attention(c);
}

TEST(Attention, WithoutKvCacheFails) {
  OpGraph g;
  int q = g.input(rand_host(DType::f32, {1, 2, 3, 4}, 421));
  int k = g.input(rand_host(DType::f32, {1, 1, 3, 4}, 422));
  int v = g.input(rand_host(DType::f32, {1, 1, 3, 4}, 423));
  g.output(g.op("fuselm.attention.default", {R(q), R(k), R(v), None(), F(0.5), I(-1), F(0.0), I(0), I(-1), S("causal")}, DType::f32, {1, 3, 2, 4}));
  try {
    g.run();
    FAIL() << "attention ran without a KV cache";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "KV cache");
  }
}

}  // namespace runtime_ops_test
}  // namespace fuselm::runtime
