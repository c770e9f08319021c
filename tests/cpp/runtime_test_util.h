#pragma once
// Helpers of the runtime op tests: host tensors holding exact values as doubles, a builder of
// small hand-made graphs (inputs, optional strided views of them, one op), running them through
// runtime::Executor, and comparing the result with a double-precision reference computed in the
// test. Nothing here calls into the op implementations: references are plain loops.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "ir/graph.h"
#include "kernels/cpu/dtype.h"
#include "runtime/executor.h"

namespace fuselm::runtime::testing {

using ir::Arg;
using ir::DType;

#ifndef EXPECT_CONTAINS
#define EXPECT_CONTAINS(haystack, needle)                                   \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (haystack) << "' lacks '" << (needle) << "'"
#endif

// ---------------------------------------------------------------------------------------------
// Host tensors: logical row-major values as doubles, each exactly representable in `dtype`.

struct Host {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<double> v;

  int64_t numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  int ndim() const { return static_cast<int>(shape.size()); }
};

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

/// Row-major multi-index of flat index i.
inline std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t o = 0;
  for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + idx[d];
  return o;
}

inline double at(const Host& t, const std::vector<int64_t>& idx) { return t.v[ravel(idx, t.shape)]; }

/// x rounded to the nearest value with `mant` significand bits (ties to even), with IEEE
/// subnormals below 2^min_exp. An independent model of fp32 -> bf16/f16 rounding.
inline double round_significand(double x, int mant, int min_exp, double max_finite) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - (mant - 1));
  const double r = std::nearbyint(x / ulp) * ulp;
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}

/// The value x takes when stored as dtype d (PyTorch's conversion: floats round to nearest even,
/// integers truncate toward zero, bool is x != 0).
inline double as_dtype(DType d, double x) {
  switch (d) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);
    case DType::bf16: return round_significand(static_cast<float>(x), 8, -126, 3.3895313892515355e38);
    case DType::f16: return round_significand(static_cast<float>(x), 11, -14, 65504.0);
    case DType::boolean: return x != 0.0 ? 1.0 : 0.0;
    default: return std::trunc(x);
  }
}

inline bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16; }

/// Random values of dtype d: floats uniform in [lo, hi], integers uniform in [lo, hi], bools 0/1.
inline Host rand_host(DType d, std::vector<int64_t> shape, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  Host h{d, std::move(shape), {}};
  std::mt19937 rng(seed);
  h.v.resize(h.numel());
  for (auto& x : h.v) {
    if (is_float(d)) {
      x = as_dtype(d, std::uniform_real_distribution<double>(lo, hi)(rng));
    } else if (d == DType::boolean) {
      x = static_cast<double>(rng() & 1u);
    } else {
      x = static_cast<double>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng));
    }
  }
  return h;
}

inline Host make_host(DType d, std::vector<int64_t> shape, std::vector<double> values) {
  Host h{d, std::move(shape), std::move(values)};
  if (static_cast<int64_t>(h.v.size()) != h.numel()) throw std::runtime_error("make_host: value count does not match the shape");
  for (auto& x : h.v) x = as_dtype(d, x);
  return h;
}

/// out[i] = f(a[i]) as dtype `out`.
template <typename F>
Host map_host(const Host& a, DType out, F f) {
  Host r{out, a.shape, std::vector<double>(a.v.size())};
  for (size_t i = 0; i < a.v.size(); ++i) r.v[i] = as_dtype(out, f(a.v[i]));
  return r;
}

/// NumPy broadcast of two shapes (right-aligned); empty optional-like result via exception.
inline std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> s(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t da = i + a.size() >= nd ? a[i + a.size() - nd] : 1;
    const int64_t db = i + b.size() >= nd ? b[i + b.size() - nd] : 1;
    if (da != db && da != 1 && db != 1) throw std::runtime_error("reference: shapes do not broadcast");
    s[i] = da == 1 ? db : da;
  }
  return s;
}

/// Value of t at an index of the broadcast shape `out_idx` (right-aligned, size-1 dims repeat).
inline double at_broadcast(const Host& t, const std::vector<int64_t>& out_idx) {
  std::vector<int64_t> idx(t.shape.size());
  const size_t off = out_idx.size() - t.shape.size();
  for (size_t d = 0; d < t.shape.size(); ++d) idx[d] = t.shape[d] == 1 ? 0 : out_idx[d + off];
  return at(t, idx);
}

/// out = f(a, b) over the broadcast shape, as dtype `out`.
template <typename F>
Host zip_host(const Host& a, const Host& b, DType out, F f) {
  Host r{out, broadcast(a.shape, b.shape), {}};
  r.v.resize(r.numel());
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto idx = unravel(i, r.shape);
    r.v[i] = as_dtype(out, f(at_broadcast(a, idx), at_broadcast(b, idx)));
  }
  return r;
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// ---------------------------------------------------------------------------------------------
// Raw storage of a host tensor in its dtype.

struct Storage {
  std::shared_ptr<void> mem;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  void* data() const { return mem.get(); }
  Tensor tensor() const { return Tensor::contiguous_view(mem.get(), dtype, shape); }
};

inline void store_value(DType d, void* p, int64_t i, double x) {
  switch (d) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(x); break;
    case DType::f64: static_cast<double*>(p)[i] = x; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(x)) >> 16); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = kernels::f32_to_f16(static_cast<float>(x)); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(x); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x); break;
    case DType::i16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(x); break;
    case DType::i8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(x); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(x); break;
    case DType::boolean: static_cast<uint8_t*>(p)[i] = x != 0.0; break;
    default: throw std::runtime_error("test storage: unsupported dtype");
  }
}

inline double load_value(DType d, const void* p, int64_t i) {
  switch (d) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::bf16: return std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
    case DType::f16: return kernels::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i16: return static_cast<const int16_t*>(p)[i];
    case DType::i8: return static_cast<const int8_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::boolean: {
      const uint8_t b = static_cast<const uint8_t*>(p)[i];
      if (b > 1) throw std::runtime_error("bool tensor holds a byte other than 0 or 1");
      return b;
    }
    default: throw std::runtime_error("test storage: unsupported dtype");
  }
}

inline Storage encode(const Host& h) {
  Storage s;
  s.dtype = h.dtype;
  s.shape = h.shape;
  const size_t bytes = (static_cast<size_t>(h.numel() * ir::dtype_size(h.dtype)) + 63) & ~size_t{63};
  s.mem = std::shared_ptr<void>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)), std::free);
  for (int64_t i = 0; i < h.numel(); ++i) store_value(h.dtype, s.mem.get(), i, h.v[i]);
  return s;
}

/// Copies any strided runtime tensor into a host tensor (logical row-major order).
inline Host read(const Tensor& t) {
  Host h{t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim), {}};
  h.v.resize(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i) {
    auto idx = unravel(i, h.shape);
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    h.v[i] = load_value(t.dtype, t.data, off);
  }
  return h;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

/// Expects got == want in dtype and shape, and values within atol + rtol*|want| (NaN matches NaN,
/// infinities must match exactly; non-float dtypes must match exactly).
inline void expect_close(const Host& got, const Host& want, double rtol = 1e-5, double atol = 1e-6,
                         const std::string& what = "") {
  SCOPED_TRACE(what);
  ASSERT_EQ(ir::dtype_name(got.dtype), ir::dtype_name(want.dtype)) << "output dtype";
  ASSERT_EQ(shape_str(got.shape), shape_str(want.shape)) << "output shape";
  int bad = 0;
  const bool exact = !is_float(want.dtype);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.v[i], w = want.v[i];
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else if (exact) ok = g == w;
    else ok = std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << "at " << shape_str(unravel(i, want.shape)) << ": got " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << "mismatching elements of " << want.numel();
}

// ---------------------------------------------------------------------------------------------
// Arguments.

inline Arg R(int node) {
  Arg a;
  a.kind = Arg::Kind::ref;
  a.ref = node;
  return a;
}
inline Arg I(int64_t x) {
  Arg a;
  a.kind = Arg::Kind::integer;
  a.i = x;
  return a;
}
inline Arg F(double x) {
  Arg a;
  a.kind = Arg::Kind::real;
  a.f = x;
  return a;
}
inline Arg B(bool x) {
  Arg a;
  a.kind = Arg::Kind::boolean;
  a.b = x;
  return a;
}
inline Arg S(std::string s) {
  Arg a;
  a.kind = Arg::Kind::string;
  a.s = std::move(s);
  return a;
}
inline Arg None() { return Arg{}; }
inline Arg L(std::vector<Arg> xs) {
  Arg a;
  a.kind = Arg::Kind::list;
  a.list = std::move(xs);
  return a;
}
inline Arg Ints(std::initializer_list<int64_t> xs) {
  std::vector<Arg> v;
  for (auto x : xs) v.push_back(I(x));
  return L(std::move(v));
}
inline Arg Sym(std::string expr) {
  Arg a;
  a.kind = Arg::Kind::sym;
  a.s = std::move(expr);
  return a;
}
inline Arg Dt(DType d) {
  Arg a;
  a.kind = Arg::Kind::dtype;
  a.dtype = d;
  return a;
}
inline Arg Dev(std::string name = "cpu") {
  Arg a;
  a.kind = Arg::Kind::device;
  a.s = std::move(name);
  return a;
}

// ---------------------------------------------------------------------------------------------
// Graph builder.

/// Every op name a test graph contained (the op tests check that each case ran its op).
inline std::set<std::string>& exercised_ops() {
  static std::set<std::string> s;
  return s;
}

/// How an input tensor reaches the op: as given, or as a strided view made by a node before it.
enum class Layout {
  contiguous,
  transposed,  // stored with the last two dims swapped, then aten.transpose.int(-1, -2)
  strided,     // stored with a last dim of 2n+1 (poison between), then aten.slice.Tensor(-1, 1, None, 2)
};

class OpGraph {
 public:
  OpGraph() {
    // Module 0 is the root, as capture writes it.
    graph_.modules.push_back(ir::Module{"", "test.Root", nlohmann::json::object()});
  }

  /// A graph input whose logical value is `t`, reaching later nodes through `layout`. dims:
  /// optional symbolic expressions of the stored shape's dims ("" for static ones).
  int input(const Host& t, Layout layout = Layout::contiguous, std::vector<std::string> dims = {}) {
    return leaf(t, layout, "input", dims);
  }
  /// A parameter placeholder (a weight) with value t.
  int param(const Host& t, Layout layout = Layout::contiguous) { return leaf(t, layout, "parameter", {}); }

  /// One op node with tensor output of the given dtype and shape.
  int op(const std::string& op, std::vector<Arg> args, DType dtype, std::vector<int64_t> shape) {
    ir::Node& n = add_node(op, std::move(args));
    n.out_kind = ir::Node::Out::tensor;
    n.out.dtype = dtype;
    for (auto s : shape) n.out.shape.push_back(ir::Dim{s, ""});
    return n.index;
  }
  /// One op node whose value is a list (split, chunk, unbind), of `count` tensors of dtype.
  int op_list(const std::string& op, std::vector<Arg> args, DType dtype, int count) {
    ir::Node& n = add_node(op, std::move(args));
    n.out_kind = ir::Node::Out::tuple;
    n.outs.assign(count, ir::TensorMeta{dtype, {}});
    return n.index;
  }
  /// One op node with a scalar value (shape arithmetic).
  int op_scalar(const std::string& op, std::vector<Arg> args) {
    ir::Node& n = add_node(op, std::move(args));
    n.out_kind = ir::Node::Out::scalar;
    n.out.dtype = DType::i64;
    return n.index;
  }
  void output(int node) { graph_.outputs = {node}; }
  ir::Graph& graph() { return graph_; }
  ir::Node& node(int i) { return graph_.nodes.at(i); }

  /// Runs the graph once on the inputs given at build time (no KV unless batch has one) and
  /// returns its output. last_output_contiguous() tells whether it came back as a dense tensor.
  Host run(const Batch& batch = {}) {
    Executor ex(graph_, params(), {});
    const auto one_rank = dist::make_single_process();  // the collectives' communicator: one process
    ex.set_comm(one_rank.get());
    std::vector<Tensor> in;
    for (const auto& s : inputs_) in.push_back(s.tensor());
    const Tensor& out = ex.run(in, batch);
    contiguous_ = out.is_contiguous();
    return read(out);
  }
  bool last_output_contiguous() const { return contiguous_; }

  std::map<std::string, Tensor> params() const {
    std::map<std::string, Tensor> m;
    for (const auto& [k, s] : params_) m[k] = s.tensor();
    return m;
  }
  /// Stored input tensors, in input order.
  const std::vector<Storage>& inputs() const { return inputs_; }

 private:
  ir::Node& add_node(const std::string& op, std::vector<Arg> args) {
    ir::Node n;
    n.index = static_cast<int>(graph_.nodes.size());
    n.name = "n" + std::to_string(n.index);
    n.op = op;
    n.args = std::move(args);
    n.module_stack = {0};
    if (op != "placeholder") exercised_ops().insert(op);
    graph_.index_by_name[n.name] = n.index;
    graph_.nodes.push_back(std::move(n));
    return graph_.nodes.back();
  }

  int leaf(const Host& t, Layout layout, const std::string& kind, const std::vector<std::string>& dims) {
    Host stored = t;
    if (layout == Layout::transposed) {
      if (t.ndim() < 2) throw std::runtime_error("transposed layout needs two dims");
      std::swap(stored.shape[t.ndim() - 1], stored.shape[t.ndim() - 2]);
      for (int64_t i = 0; i < t.numel(); ++i) {
        auto idx = unravel(i, t.shape);
        std::swap(idx[t.ndim() - 1], idx[t.ndim() - 2]);
        stored.v[ravel(idx, stored.shape)] = t.v[i];
      }
    } else if (layout == Layout::strided) {
      if (t.ndim() < 1) throw std::runtime_error("strided layout needs a dim");
      const int64_t n = t.shape.back();
      stored.shape.back() = 2 * n + 1;
      const double poison = is_float(t.dtype) ? NAN : t.dtype == DType::boolean ? 1.0 : 77.0;
      stored.v.assign(stored.numel(), poison);
      for (int64_t i = 0; i < t.numel(); ++i) {
        auto idx = unravel(i, t.shape);
        idx.back() = 2 * idx.back() + 1;
        stored.v[ravel(idx, stored.shape)] = t.v[i];
      }
    }
    ir::Node& n = add_node("placeholder", {});
    n.placeholder_kind = kind;
    n.target = kind + std::to_string(n.index);
    n.out_kind = ir::Node::Out::tensor;
    n.out.dtype = t.dtype;
    for (size_t d = 0; d < stored.shape.size(); ++d)
      n.out.shape.push_back(ir::Dim{stored.shape[d], d < dims.size() ? dims[d] : ""});
    const int idx = n.index;
    if (kind == "input") inputs_.push_back(encode(stored));
    else params_[n.target] = encode(stored);
    if (layout == Layout::transposed) return op("aten.transpose.int", {R(idx), I(-1), I(-2)}, t.dtype, t.shape);
    if (layout == Layout::strided) return op("aten.slice.Tensor", {R(idx), I(-1), I(1), None(), I(2)}, t.dtype, t.shape);
    return idx;
  }

  ir::Graph graph_;
  std::vector<Storage> inputs_;
  std::map<std::string, Storage> params_;
  bool contiguous_ = false;
};

/// Floats with |x| in [0.5, 2], alternating sign (divisors).
Host nonzero_host(std::vector<int64_t> shape, uint32_t seed);

/// Adds the cases of the router and experts ops (runtime_router_ops_test.cc) to the op table.
void add_router_cases(std::map<std::string, std::function<void()>>& m);
/// Cases of core_aten_ops.cc (runtime_core_aten_ops_test.cc).
void add_core_aten_cases(std::map<std::string, std::function<void()>>& m);
/// Cases of the stateful ops, recurrent_ops.cc (runtime_recurrent_ops_test.cc).
void add_recurrent_cases(std::map<std::string, std::function<void()>>& m);

}  // namespace fuselm::runtime::testing
