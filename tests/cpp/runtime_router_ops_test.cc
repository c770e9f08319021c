// Cases for the router and experts ops (router_ops.cc, experts_op.cc), added to the op table of
// runtime_ops_test.cc: each runs the op in a hand-made graph and compares with plain loops written
// here from PyTorch's documented semantics (top-k ties keep the lower index first).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "runtime_test_util.h"

namespace fuselm::runtime::testing {
namespace runtime_router_ops_test {

// x with some repeated values, so that ties occur.
Host with_ties(std::vector<int64_t> shape, uint32_t seed) {
  Host h = rand_host(DType::i64, std::move(shape), seed, -3, 3);
  h.dtype = DType::f32;
  for (auto& v : h.v) v = v * 0.5;
  return h;
}

// (values, indices) of the top-k along `dim` of a 2-d x.
std::pair<Host, Host> topk_ref(const Host& x, int64_t k, int dim, bool largest) {
  const int64_t rows = x.shape[1 - dim], w = x.shape[dim];
  std::vector<int64_t> shape = x.shape;
  shape[dim] = k;
  Host vals{x.dtype, shape, std::vector<double>(numel_of(shape))}, idx{DType::i64, shape, vals.v};
  for (int64_t r = 0; r < rows; ++r) {
    auto get = [&](int64_t j) { return dim == 1 ? at(x, {r, j}) : at(x, {j, r}); };
    std::vector<int64_t> o(w);
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return largest ? get(a) > get(b) : get(a) < get(b); });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t off = dim == 1 ? r * k + j : j * rows + r;
      vals.v[off] = get(o[j]);
      idx.v[off] = static_cast<double>(o[j]);
    }
  }
  return {vals, idx};
}

void topk_case() {
  const std::string op = "aten.topk.default";
  for (int dim : {1, 0}) {
    for (bool largest : {true, false}) {
      Host x = with_ties({4, 9}, 11 + dim);
      const int64_t k = 3;
      auto [vals, idx] = topk_ref(x, k, dim, largest);
      for (int which : {0, 1}) {
        OpGraph g;
        int xn = g.input(x, Layout::transposed);
        int t = g.op_list(op, {R(xn), I(k), I(dim == 1 ? -1 : 0), B(largest), B(true)}, DType::f32, 2);
        g.node(t).outs[1].dtype = DType::i64;
        const Host& want = which ? idx : vals;
        g.output(g.op("getitem", {R(t), I(which)}, want.dtype, want.shape));
        expect_close(g.run(), want, 0, 0, "dim " + std::to_string(dim) + (largest ? " largest " : " smallest ") +
                                               (which ? "indices" : "values"));
      }
    }
  }
}

void max_dim_case() {
  const std::string op = "aten.max.dim";
  Host x = with_ties({3, 4, 5}, 21);
  for (bool keep : {false, true}) {
    std::vector<int64_t> shape = keep ? std::vector<int64_t>{3, 1, 5} : std::vector<int64_t>{3, 5};
    Host vals{DType::f32, shape, std::vector<double>(15)}, idx{DType::i64, shape, std::vector<double>(15)};
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t c = 0; c < 5; ++c) {
        int64_t best = 0;
        for (int64_t b = 1; b < 4; ++b)
          if (at(x, {a, b, c}) > at(x, {a, best, c})) best = b;
        vals.v[a * 5 + c] = at(x, {a, best, c});
        idx.v[a * 5 + c] = static_cast<double>(best);
      }
    for (int which : {0, 1}) {
      OpGraph g;
      int xn = g.input(x);
      int t = g.op_list(op, {R(xn), I(-2), B(keep)}, DType::f32, 2);
      g.node(t).outs[1].dtype = DType::i64;
      const Host& want = which ? idx : vals;
      g.output(g.op("getitem", {R(t), I(which)}, want.dtype, want.shape));
      expect_close(g.run(), want, 0, 0, std::string(keep ? "keepdim " : "") + (which ? "indices" : "values"));
    }
  }
}

void gather_case() {
  const std::string op = "aten.gather.default";
  Host x = rand_host(DType::f32, {3, 6}, 31);
  Host index = rand_host(DType::i64, {3, 4}, 32, 0, 5);
  Host want{DType::f32, {3, 4}, std::vector<double>(12)};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 4; ++j) want.v[r * 4 + j] = at(x, {r, static_cast<int64_t>(at(index, {r, j}))});
  OpGraph g;
  int xn = g.input(x, Layout::transposed), in = g.input(index);
  g.output(g.op(op, {R(xn), I(-1), R(in), B(false)}, DType::f32, {3, 4}));
  expect_close(g.run(), want, 0, 0, "dim -1 of a transposed input");

  Host index0 = rand_host(DType::i64, {2, 6}, 33, 0, 2);
  Host want0{DType::f32, {2, 6}, std::vector<double>(12)};
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 6; ++j) want0.v[r * 6 + j] = at(x, {static_cast<int64_t>(at(index0, {r, j})), j});
  OpGraph g0;
  int xn0 = g0.input(x), in0 = g0.input(index0);
  g0.output(g0.op(op, {R(xn0), I(0), R(in0), B(false)}, DType::f32, {2, 6}));
  expect_close(g0.run(), want0, 0, 0, "dim 0");

  OpGraph bad;
  Host oob = make_host(DType::i64, {3, 1}, {0, 6, 1});
  int xb = bad.input(x), ib = bad.input(oob);
  bad.output(bad.op(op, {R(xb), I(1), R(ib), B(false)}, DType::f32, {3, 1}));
  try {
    bad.run();
    ADD_FAILURE() << "an index out of bounds did not fail";
  } catch (const std::exception& e) {
    EXPECT_CONTAINS(e.what(), "index 6 is out of bounds for dimension 1 of size 6");
  }
}

// scatter_ writes into the tensor the graph later reads by its original node (the clone).
void scatter_case(bool in_place) {
  const std::string op = in_place ? "aten.scatter_.value" : "aten.scatter.value";
  Host x = rand_host(DType::f32, {3, 5}, 41);
  Host index = make_host(DType::i64, {3, 2}, {4, 0, 2, 2, 1, 3});
  Host want = x;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 2; ++j) want.v[r * 5 + static_cast<int64_t>(at(index, {r, j}))] = 1.5;
  OpGraph g;
  int xn = g.input(x);
  int base = g.op("aten.clone.default", {R(xn), None()}, DType::f32, {3, 5});
  int in = g.input(index);
  int s = g.op(op, {R(base), I(1), R(in), F(1.5)}, DType::f32, {3, 5});
  if (in_place) {
    g.output(g.op("aten.mul.Tensor", {R(base), R(s)}, DType::f32, {3, 5}));  // base and s are the same tensor
    expect_close(g.run(), zip_host(want, want, DType::f32, [](double a, double b) { return a * b; }), 1e-6, 0,
                 "read back through the original tensor");
  } else {
    g.output(g.op("aten.sub.Tensor", {R(s), R(base), I(1)}, DType::f32, {3, 5}));  // base unchanged
    expect_close(g.run(), zip_host(want, x, DType::f32, [](double a, double b) { return a - b; }), 1e-6, 1e-6,
                 "out of place leaves its input alone");
  }
}

void arith_in_place_case(const std::string& name, const std::function<double(double, double)>& f) {
  const std::string op = "aten." + name + "_.Tensor";
  Host x = rand_host(DType::f32, {2, 3, 4}, 51);
  Host y = nonzero_host({3, 1}, 52);
  Host want = zip_host(x, y, DType::f32, f);
  OpGraph g;
  int xn = g.input(x);
  int base = g.op("aten.clone.default", {R(xn), None()}, DType::f32, {2, 3, 4});
  int yn = g.input(y);
  g.op(op, {R(base), R(yn)}, DType::f32, {2, 3, 4});
  int later = g.op("aten.neg.default", {R(base)}, DType::f32, {2, 3, 4});  // reads the mutated base
  g.output(later);
  expect_close(g.run(), map_host(want, DType::f32, [](double v) { return -v; }), 1e-6, 1e-6, "y broadcast from [3, 1]");
}

// ---- fuselm.experts -------------------------------------------------------------------------

struct ExpertsCase {
  std::string act = "silu";
  bool concatenated = true, transposed = false, has_gate = true, bias = false;
  DType wd = DType::f32;
  int64_t t = 3, k = 2, h = 8, i = 6, e = 5;
  double alpha = 0, limit = 0;
  // shared expert (fuselm.experts_shared): "" none, else its activation
  std::string shared_act;
  bool shared_glu = true, shared_scaled = true;
  int64_t shared_i = 5;
};

double act_ref(const std::string& a, double v) {
  if (a == "silu") return v / (1 + std::exp(-v));
  if (a == "gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (a == "gelu_tanh") return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  if (a == "relu2") return v > 0 ? v * v : 0;
  return v > 0 ? v : 0;
}

void check_experts(const ExpertsCase& c, const std::string& what) {
  // against fp32 activations: the paths that round them to bf16 for bf16 weights (avx512bf16,
  // amx) are checked by kernels_linear_test and test_bf16_agreement.py
  kernels::ScopedCpuIsa fp32_activations(std::min(kernels::cpu_isa(), kernels::Isa::avx512));
  const int64_t n_up = c.has_gate ? 2 * c.i : c.i;
  Host x = rand_host(DType::f32, {c.t, c.h}, 61);
  Host ids = rand_host(DType::i64, {c.t, c.k}, 62, 0, c.e - 1);
  Host wts = rand_host(DType::f32, {c.t, c.k}, 63, 0.1, 1.0);
  // Logical weights W1[e][n][h], W2[e][h][i]; stored transposed when c.transposed.
  Host w1 = rand_host(c.wd, {c.e, n_up, c.h}, 64, -0.5, 0.5), w2 = rand_host(c.wd, {c.e, c.h, c.i}, 65, -0.5, 0.5);
  Host b1 = rand_host(DType::f32, {c.e, n_up}, 66, -0.3, 0.3), b2 = rand_host(DType::f32, {c.e, c.h}, 67, -0.3, 0.3);
  auto stored = [&](const Host& w) {
    if (!c.transposed) return w;
    Host s{w.dtype, {w.shape[0], w.shape[2], w.shape[1]}, w.v};
    for (int64_t a = 0; a < w.shape[0]; ++a)
      for (int64_t p = 0; p < w.shape[1]; ++p)
        for (int64_t q = 0; q < w.shape[2]; ++q) s.v[(a * w.shape[2] + q) * w.shape[1] + p] = at(w, {a, p, q});
    return s;
  };
  Host want{DType::f32, {c.t, c.h}, std::vector<double>(c.t * c.h, 0.0)};
  for (int64_t r = 0; r < c.t; ++r)
    for (int64_t s = 0; s < c.k; ++s) {
      const auto ex = static_cast<int64_t>(at(ids, {r, s}));
      std::vector<double> gu(n_up), a(c.i);
      for (int64_t n = 0; n < n_up; ++n) {
        double v = c.bias ? at(b1, {ex, n}) : 0.0;
        for (int64_t p = 0; p < c.h; ++p) v += at(w1, {ex, n, p}) * at(x, {r, p});
        gu[n] = v;
      }
      for (int64_t j = 0; j < c.i; ++j) {
        const double g = !c.has_gate ? 0.0 : c.concatenated ? gu[j] : gu[2 * j];  // no gate: gu is [i]
        const double u = !c.has_gate ? gu[j] : c.concatenated ? gu[c.i + j] : gu[2 * j + 1];
        if (c.act == "clamped_swiglu") {
          const double gc = std::min(g, c.limit), uc = std::clamp(u, -c.limit, c.limit);
          a[j] = (uc + 1) * gc / (1 + std::exp(-c.alpha * gc));
        } else if (c.limit > 0) {  // act(clamp(gate, max=limit)) * clamp(up, -limit, limit)
          a[j] = act_ref(c.act, std::min(g, c.limit)) * std::clamp(u, -c.limit, c.limit);
        } else {
          a[j] = c.has_gate ? act_ref(c.act, g) * u : act_ref(c.act, u);
        }
      }
      for (int64_t q = 0; q < c.h; ++q) {
        double v = c.bias ? at(b2, {ex, q}) : 0.0;
        for (int64_t j = 0; j < c.i; ++j) v += at(w2, {ex, q, j}) * a[j];
        want.v[r * c.h + q] += at(wts, {r, s}) * v;
      }
    }
  const bool shared = !c.shared_act.empty();
  Host sgw = rand_host(c.wd, {c.shared_i, c.h}, 68, -0.5, 0.5), suw = rand_host(c.wd, {c.shared_i, c.h}, 69, -0.5, 0.5);
  Host sdw = rand_host(c.wd, {c.h, c.shared_i}, 70, -0.5, 0.5), ssw = rand_host(c.wd, {1, c.h}, 71, -0.5, 0.5);
  if (shared)
    for (int64_t r = 0; r < c.t; ++r) {
      std::vector<double> a(c.shared_i);
      for (int64_t j = 0; j < c.shared_i; ++j) {
        double gv = 0, uv = 0;
        for (int64_t p = 0; p < c.h; ++p) {
          gv += at(sgw, {j, p}) * at(x, {r, p});
          uv += at(suw, {j, p}) * at(x, {r, p});
        }
        a[j] = c.shared_glu ? act_ref(c.shared_act, gv) * uv : act_ref(c.shared_act, uv);
      }
      double sv = 0;
      for (int64_t p = 0; p < c.h; ++p) sv += at(ssw, {0, p}) * at(x, {r, p});
      const double scale = c.shared_scaled ? 1 / (1 + std::exp(-sv)) : 1.0;
      for (int64_t q = 0; q < c.h; ++q) {
        double v = 0;
        for (int64_t j = 0; j < c.shared_i; ++j) v += at(sdw, {q, j}) * a[j];
        want.v[r * c.h + q] += scale * v;
      }
    }
  OpGraph g;
  int xn = g.input(x), in = g.input(ids), wn = g.input(wts);
  int p1 = g.param(stored(w1)), p2 = g.param(stored(w2));
  Arg bias1 = None(), bias2 = None();
  if (c.bias) {
    bias1 = R(g.param(b1));
    bias2 = R(g.param(b2));
  }
  std::vector<Arg> args{R(xn), R(in), R(wn), R(p1), R(p2), bias1, bias2, S(c.act), B(c.concatenated), B(c.transposed),
                        B(c.has_gate), F(c.alpha), F(c.limit)};
  if (shared) {
    args.push_back(c.shared_glu ? R(g.param(sgw)) : None());
    args.push_back(R(g.param(suw)));
    args.push_back(R(g.param(sdw)));
    args.push_back(c.shared_scaled ? R(g.param(ssw)) : None());
    args.push_back(S(c.shared_act));
  }
  g.output(g.op(shared ? "fuselm.experts_shared.default" : "fuselm.experts.default", args, DType::f32, {c.t, c.h}));
  expect_close(g.run(), want, 2e-5, 2e-5, what);
}

void experts_shared_case() {
  ExpertsCase gated;
  gated.shared_act = "silu";
  check_experts(gated, "gated GLU shared expert (silu)");
  ExpertsCase ungated;
  ungated.shared_act = "gelu_tanh";
  ungated.shared_scaled = false;
  ungated.t = 70;
  ungated.wd = DType::bf16;
  check_experts(ungated, "ungated GLU shared expert (gelu_tanh), bf16, 70 tokens");
  ExpertsCase mlp;
  mlp.shared_act = "relu";
  mlp.shared_glu = false;
  check_experts(mlp, "gated plain-MLP shared expert (relu)");
}

void experts_case() {
  check_experts({}, "silu, concatenated, decode-sized");
  ExpertsCase big;
  big.t = 70;
  big.k = 3;
  big.e = 9;
  check_experts(big, "silu, 210 pairs over 9 experts (one thread per expert)");
  ExpertsCase few;
  few.t = 200;
  few.k = 1;
  few.e = 3;
  few.h = 40;
  few.i = 24;
  check_experts(few, "~67 rows per expert over 3 experts (threaded GEMMs with 2 or more threads)");
  ExpertsCase gpt;
  gpt.act = "clamped_swiglu";
  gpt.concatenated = false;
  gpt.transposed = true;
  gpt.bias = true;
  gpt.alpha = 1.702;
  gpt.limit = 0.4;  // small enough that the probes' values reach the clamps
  check_experts(gpt, "clamped SwiGLU, interleaved, transposed, biases");
  ExpertsCase clamped;
  clamped.limit = 0.3;  // small enough that the probes' values reach both clamps
  clamped.concatenated = false;
  check_experts(clamped, "silu(clamp(gate, max=L)) * clamp(up, -L, L), interleaved (DeepSeek-V4)");
  clamped.act = "gelu";
  clamped.concatenated = true;
  check_experts(clamped, "gelu(clamp(gate, max=L)) * clamp(up, -L, L), concatenated");
  ExpertsCase bf;
  bf.wd = DType::bf16;
  bf.act = "gelu_tanh";
  check_experts(bf, "bf16 weights, gelu_tanh");
  ExpertsCase nog;
  nog.has_gate = false;
  nog.act = "relu";
  nog.concatenated = false;
  check_experts(nog, "no gate, relu");
  ExpertsCase sq = nog;
  sq.act = "relu2";
  check_experts(sq, "no gate, relu2 (relu(x)^2, Nemotron-H's experts)");
  ExpertsCase sq_gated;
  sq_gated.act = "relu2";
  check_experts(sq_gated, "relu2(gate) * up");
  ExpertsCase gelu;
  gelu.act = "gelu";
  gelu.concatenated = false;
  check_experts(gelu, "gelu over interleaved halves");
}

// ---- fuselm.moe_route ------------------------------------------------------------------------

struct RouteCase {
  std::string scoring = "softmax", group_score = "none";
  int64_t groups = 1, topk_group = 1, k = 2;
  bool correction = false, renorm = false;
  double eps = 0.0, scaling = 1.0;
};

void check_route(const RouteCase& c, const std::string& what) {
  const int64_t t = 5, h = 6, e = 8;
  Host x = rand_host(DType::f32, {1, t, h}, 71);
  Host w = rand_host(DType::f32, {e, h}, 72, -1.5, 1.5);
  Host bias = rand_host(DType::f32, {e}, 73, -0.3, 0.3);
  Host want_w{DType::f32, {t, c.k}, std::vector<double>(t * c.k)}, want_i{DType::i64, {t, c.k}, want_w.v};
  for (int64_t r = 0; r < t; ++r) {
    std::vector<double> lg(e), sc(e), ch(e);
    for (int64_t j = 0; j < e; ++j) {
      lg[j] = 0;
      for (int64_t p = 0; p < h; ++p) lg[j] += at(x, {0, r, p}) * at(w, {j, p});
    }
    double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(lg[j] - mx);
    for (int64_t j = 0; j < e; ++j)
      sc[j] = c.scoring == "softmax" ? std::exp(lg[j] - mx) / sum : c.scoring == "sigmoid" ? 1 / (1 + std::exp(-lg[j])) : lg[j];
    for (int64_t j = 0; j < e; ++j) ch[j] = sc[j] + (c.correction ? bias.v[j] : 0.0);
    auto order_of = [](const std::vector<double>& v) {
      std::vector<int64_t> o(v.size());
      std::iota(o.begin(), o.end(), 0);
      std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
      return o;
    };
    if (c.groups > 1) {
      const int64_t per = e / c.groups;
      std::vector<double> gs(c.groups);
      for (int64_t gi = 0; gi < c.groups; ++gi) {
        std::vector<double> part(ch.begin() + gi * per, ch.begin() + (gi + 1) * per);
        auto o = order_of(part);
        gs[gi] = c.group_score == "max" ? part[o[0]] : part[o[0]] + part[o[1]];
      }
      auto go = order_of(gs);
      for (int64_t j = 0; j < e; ++j)
        if (std::find(go.begin(), go.begin() + c.topk_group, j / per) == go.begin() + c.topk_group) ch[j] = -INFINITY;
    }
    auto o = order_of(ch);
    std::vector<double> wk(c.k);
    for (int64_t j = 0; j < c.k; ++j) wk[j] = sc[o[j]];
    if (c.scoring == "softmax_of_topk") {
      double m = *std::max_element(wk.begin(), wk.end()), s2 = 0;
      for (auto& v : wk) s2 += (v = std::exp(v - m));
      for (auto& v : wk) v /= s2;
    }
    double tot = c.eps;
    for (double v : wk) tot += v;
    for (int64_t j = 0; j < c.k; ++j) {
      want_w.v[r * c.k + j] = static_cast<float>((c.renorm ? wk[j] / tot : wk[j]) * c.scaling);
      want_i.v[r * c.k + j] = static_cast<double>(o[j]);
    }
  }
  for (int which : {0, 1}) {
    OpGraph g;
    int xn = g.input(x), wn = g.param(w);
    Arg b = c.correction ? R(g.param(bias)) : None();
    int route = g.op_list("fuselm.moe_route.default",
                          {R(xn), R(wn), b, S(c.scoring), I(c.groups), I(c.topk_group), S(c.group_score), I(c.k),
                           B(c.renorm), F(c.eps), F(c.scaling)},
                          DType::f32, 2);
    g.node(route).outs[1].dtype = DType::i64;
    const Host& want = which ? want_i : want_w;
    g.output(g.op("getitem", {R(route), I(which)}, want.dtype, want.shape));
    expect_close(g.run(), want, 1e-5, 1e-6, what + (which ? " (ids)" : " (weights)"));
  }
}

void moe_route_case() {
  check_route({}, "softmax top-2");
  RouteCase renorm;
  renorm.renorm = true;
  renorm.k = 3;
  check_route(renorm, "softmax top-3 renormalized");
  RouteCase ds;
  ds.scoring = "sigmoid";
  ds.correction = true;
  ds.groups = 4;
  ds.topk_group = 2;
  ds.group_score = "top2_sum";
  ds.renorm = true;
  ds.eps = 1e-20;
  ds.scaling = 2.5;
  ds.k = 3;
  check_route(ds, "sigmoid, correction bias, 2 of 4 groups by top-2 sum, renorm, scaled");
  RouteCase v2;
  v2.groups = 4;
  v2.topk_group = 1;
  v2.group_score = "max";
  v2.scaling = 1.5;
  check_route(v2, "softmax, 1 of 4 groups by max, scaled");
  RouteCase oss;
  oss.scoring = "softmax_of_topk";
  oss.k = 4;
  check_route(oss, "softmax over the top-4 logits");
  OpGraph bad;
  int xn = bad.input(rand_host(DType::f32, {2, 6}, 74)), wn = bad.param(rand_host(DType::f32, {8, 6}, 75));
  int route = bad.op_list("fuselm.moe_route.default",
                          {R(xn), R(wn), None(), S("softmax"), I(3), I(1), S("max"), I(2), B(false), F(0.0), F(1.0)},
                          DType::f32, 2);
  bad.output(bad.op("getitem", {R(route), I(0)}, DType::f32, {2, 2}));
  try {
    bad.run();
    ADD_FAILURE() << "3 groups of 8 experts did not fail";
  } catch (const std::exception& err) {
    EXPECT_CONTAINS(err.what(), "8 experts cannot keep 1 of 3 groups");
  }
}

}  // namespace runtime_router_ops_test

Host nonzero_host(std::vector<int64_t> shape, uint32_t seed) {
  Host h = rand_host(DType::f32, std::move(shape), seed, 0.5, 2.0);
  for (size_t j = 0; j < h.v.size(); j += 2) h.v[j] = -h.v[j];
  return h;
}

void add_router_cases(std::map<std::string, std::function<void()>>& m) {
  using namespace runtime_router_ops_test;
  m["aten.topk.default"] = topk_case;
  m["aten.max.dim"] = max_dim_case;
  m["aten.gather.default"] = gather_case;
  m["aten.scatter_.value"] = [] { scatter_case(true); };
  m["aten.scatter.value"] = [] { scatter_case(false); };
  m["aten.add_.Tensor"] = [] { arith_in_place_case("add", [](double a, double b) { return a + b; }); };
  m["aten.sub_.Tensor"] = [] { arith_in_place_case("sub", [](double a, double b) { return a - b; }); };
  m["aten.mul_.Tensor"] = [] { arith_in_place_case("mul", [](double a, double b) { return a * b; }); };
  m["aten.div_.Tensor"] = [] { arith_in_place_case("div", [](double a, double b) { return a / b; }); };
  m["fuselm.experts.default"] = experts_case;
  m["fuselm.moe_route.default"] = moe_route_case;
  m["fuselm.experts_shared.default"] = experts_shared_case;
}

}  // namespace fuselm::runtime::testing
