#include "fusers/pattern.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/op_defs.h"

namespace fuselm::fusers {

int ref_arg(const ir::Node& n, size_t i) {
  return i < n.args.size() && n.args[i].kind == ir::Arg::Kind::ref ? n.args[i].ref : -1;
}

std::optional<double> number_arg(const ir::Node& n, size_t i) {
  if (i >= n.args.size()) return std::nullopt;
  const auto& a = n.args[i];
  if (a.kind == ir::Arg::Kind::real) return a.f;
  if (a.kind == ir::Arg::Kind::integer) return static_cast<double>(a.i);
  return std::nullopt;
}

bool is_op(const ir::Node& n, std::string_view op) { return n.op == op; }

bool is_float_cast(const ir::Node& n) {
  if (!ir::op_traits(n.op).cast) return false;
  return n.out_kind == ir::Node::Out::tensor && ir::is_floating(n.out.dtype) && ref_arg(n, 0) >= 0;
}

bool is_reshape(const ir::Node& n) { return is_view_of(n, {ir::ViewKind::reshape}); }

bool is_view_of(const ir::Node& n, std::initializer_list<ir::ViewKind> kinds) {
  const ir::ViewKind k = ir::op_traits(n.op).view;
  return k != ir::ViewKind::none && std::find(kinds.begin(), kinds.end(), k) != kinds.end() && ref_arg(n, 0) >= 0;
}

int strip_casts(const ir::Graph& g, int i, const Subgraph* sg, std::vector<int>* covered) {
  // Within sg only: a cast made outside the module (a wrapper casting its embeddings before its
  // language model) is the module's input, and a fusion may refer to nothing further up.
  while (i >= 0 && is_float_cast(g.nodes[i]) && (!sg || sg->owns(i))) {
    if (sg && covered && sg->owns(i)) covered->push_back(i);
    i = ref_arg(g.nodes[i], 0);
  }
  return i;
}

bool is_parameter(const ir::Graph& g, int i) {
  return i >= 0 && g.nodes[i].op == "placeholder" && g.nodes[i].placeholder_kind == "parameter";
}

std::optional<int64_t> static_dim(const ir::TensorMeta& t, int d) {
  const int nd = static_cast<int>(t.shape.size());
  if (d < 0) d += nd;
  if (d < 0 || d >= nd || t.shape[d].symbolic()) return std::nullopt;
  return t.shape[d].value;
}

std::optional<LinearLike> as_linear(const ir::Graph& g, int i) {
  if (i < 0) return std::nullopt;
  const ir::Node& n = g.nodes[i];
  LinearLike l;
  if (n.op == ops::linear) {
    l.out = i;
    l.x = ref_arg(n, 0);
    l.weight = ref_arg(n, 1);
    l.bias = ref_arg(n, 2);
    l.nodes = {i};
    if (!is_parameter(g, l.weight) || (l.bias >= 0 && !is_parameter(g, l.bias))) return std::nullopt;
    if (g.nodes[l.weight].out.shape.size() != 2) return std::nullopt;
    return l;
  }
  int addmm = i;
  if (is_reshape(n)) addmm = ref_arg(n, 0);
  if (addmm < 0 || g.nodes[addmm].op != ops::addmm) return std::nullopt;
  const ir::Node& mm = g.nodes[addmm];
  if (number_arg(mm, 3).value_or(0) != 1.0 || number_arg(mm, 4).value_or(0) != 1.0) return std::nullopt;
  l.kn = true;
  l.out = i;
  l.addmm = addmm;
  l.bias = ref_arg(mm, 0);
  l.weight = ref_arg(mm, 2);
  const int x2 = ref_arg(mm, 1);
  if (x2 < 0 || !is_parameter(g, l.weight) || !is_parameter(g, l.bias)) return std::nullopt;
  if (g.nodes[l.weight].out.shape.size() != 2) return std::nullopt;
  if (is_reshape(g.nodes[x2])) {
    l.x_view = x2;
    l.x = ref_arg(g.nodes[x2], 0);
  } else {
    l.x = x2;
  }
  if (addmm != i) l.nodes.push_back(addmm);
  l.nodes.push_back(i);
  if (l.x_view >= 0) l.nodes.push_back(l.x_view);
  return l;
}

int64_t linear_out_width(const ir::Graph& g, const LinearLike& l) {
  return static_dim(g.nodes[l.weight].out, l.kn ? 1 : 0).value_or(0);
}

int64_t linear_in_width(const ir::Graph& g, const LinearLike& l) {
  return static_dim(g.nodes[l.weight].out, l.kn ? 0 : 1).value_or(0);
}

std::optional<std::string> act_and_mul_activation(const ir::Node& an, Why& why) {
  if (an.op == ops::silu) return std::string("silu");
  if (an.op == ops::gelu) {
    const std::string approx = an.args.size() > 1 && an.args[1].kind == ir::Arg::Kind::string ? an.args[1].s : "none";
    if (approx == "none") return std::string("gelu");
    if (approx == "tanh") return std::string("gelu_tanh");
    return why.reject("gelu approximation '{}' has no fused kernel", approx);
  }
  return why.reject("{} is not an activation with a fused act-and-mul (silu, gelu, gelu_tanh)", an.op);
}

std::optional<LinearLike> down_projection(const Subgraph& sg, int v) {
  const ir::Graph& g = *sg.graph;
  const auto& us = sg.users_of(v);
  if (us.size() != 1 || !sg.contains(us[0])) return std::nullopt;
  if (auto l = as_linear(g, us[0]); l && l->x == v) return l;
  for (int u : sg.users_of(us[0]))
    if (auto l = as_linear(g, u); l && l->x == v) return l;
  return std::nullopt;
}

bool is_elementwise_unary(const ir::Node& n) {
  int refs = 0;
  for (const auto& a : n.args) refs += a.kind == ir::Arg::Kind::ref;
  return refs == 1 && ref_arg(n, 0) >= 0 && n.out_kind == ir::Node::Out::tensor;
}

std::set<int> upstream_linears(const Subgraph& sg, int v0, const std::set<int>& stop, std::set<int>* reached) {
  const ir::Graph& g = *sg.graph;
  std::set<int> seen, linears;
  std::vector<int> stack{v0};
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (v < 0 || !sg.contains(v) || !seen.insert(v).second) continue;
    if (stop.count(v)) {
      if (reached) reached->insert(v);
      continue;
    }
    if (auto l = as_linear(g, v); l && l->out == v) {
      linears.insert(v);
      continue;
    }
    for (const auto& a : g.nodes[v].args) {
      if (a.kind == ir::Arg::Kind::ref) stack.push_back(a.ref);
      for (const auto& y : a.list)
        if (y.kind == ir::Arg::Kind::ref) stack.push_back(y.ref);
    }
  }
  return linears;
}

std::optional<int> stacked_linear(const ir::Graph& g, Fusion& f, std::span<const LinearLike> parts,
                                  std::string_view prefix, Why& why) {
  const LinearLike& p0 = parts[0];
  const int axis = p0.kn ? 1 : 0;
  int64_t total = 0;
  const int64_t k = linear_in_width(g, p0);
  for (const auto& p : parts) {
    const int64_t n = linear_out_width(g, p), kp = linear_in_width(g, p);
    if (!n || !kp) return why.reject("projection weight shape is not static");
    if (kp != k) return why.reject("stacked projections differ in input width: {} != {}", kp, k);
    if (p.x != p0.x || p.kn != p0.kn || (p.bias >= 0) != (p0.bias >= 0))
      return why.reject("stacked projections differ in input, layout or bias");
    total += n;
  }
  auto add = [&](std::string_view what, std::vector<int> sources, std::vector<int64_t> shape) {
    WeightTransform w;
    w.name = fmt::format("{}.{}", prefix, what);
    w.sources = std::move(sources);
    w.axis = shape.size() == 1 ? 0 : axis;
    w.shape = shape;
    w.shard = Shard::column;
    NewNode n;
    n.op = "placeholder";
    n.weight = static_cast<int>(f.weights.size());
    n.out.dtype = g.nodes[w.sources[0]].out.dtype;
    for (auto d : shape) n.out.shape.push_back(ir::Dim{d, {}});
    f.weights.push_back(std::move(w));
    f.nodes.push_back(std::move(n));
    return ref(new_ref(static_cast<int>(f.nodes.size()) - 1));
  };
  std::vector<int> ws, bs;
  for (const auto& p : parts) ws.push_back(p.weight), bs.push_back(p.bias);
  const ir::Arg w = add("weight", ws, axis == 0 ? std::vector<int64_t>{total, k} : std::vector<int64_t>{k, total});
  const ir::Arg b = p0.bias >= 0 ? add("bias", bs, {total}) : none();
  NewNode gemm;
  if (!p0.kn) {
    gemm.op = ops::linear;
    gemm.args = {ref(p0.x), w, b};
    gemm.out = g.nodes[p0.out].out;
  } else {
    gemm.op = ops::addmm;
    gemm.args = {b, ref(p0.x_view >= 0 ? p0.x_view : p0.x), w, integer(1), integer(1)};
    gemm.out = g.nodes[p0.addmm].out;
  }
  gemm.out.shape.back() = ir::Dim{total, {}};
  f.nodes.push_back(std::move(gemm));
  return new_ref(static_cast<int>(f.nodes.size()) - 1);
}

std::optional<LinearLike> output_projection(const Subgraph& sg, int attention) {
  const ir::Graph& g = *sg.graph;
  // Which linear-like reads a value as its input (x); the outer form of a Conv1D (view of addmm)
  // and its bare addmm both read x, either names the layer.
  std::map<int, LinearLike> reader;
  for (int i : sg.nodes)
    if (auto l = as_linear(g, i); l && l->out == i) reader.insert_or_assign(l->x, *l);
  std::vector<int> stack{attention};
  std::set<int> seen, found;
  std::optional<LinearLike> out;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    if (auto it = reader.find(v); it != reader.end()) {
      if (found.insert(it->second.out).second) out = it->second;
      continue;
    }
    for (int u : sg.users_of(v))
      if (sg.contains(u)) stack.push_back(u);
  }
  if (found.size() != 1) return std::nullopt;
  return out;
}

NewNode op_node(std::string_view op, std::initializer_list<std::pair<std::string_view, ir::Arg>> args) {
  const auto& def = ir::op_def(op);
  NewNode n;
  n.op = std::string(op);
  n.args.resize(def.args.size());
  for (const auto& [name, value] : args) n.args[def.arg(name)] = value;
  return n;
}

ir::Arg& arg_of(NewNode& n, std::string_view name) { return n.args.at(ir::op_def(n.op).arg(name)); }

std::optional<double> number_arg(const ir::Node& n, std::string_view name) {
  return number_arg(n, ir::op_def(n.op).arg(name));
}

ir::Arg shape_arg(const ir::TensorMeta& t) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::list;
  for (const auto& d : t.shape) {
    ir::Arg x;
    if (d.symbolic()) {
      x.kind = ir::Arg::Kind::sym;
      x.s = d.expr;
    } else {
      x.kind = ir::Arg::Kind::integer;
      x.i = d.value;
    }
    a.list.push_back(x);
  }
  return a;
}

ir::Arg ref(int i) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::ref;
  a.ref = i;
  return a;
}

ir::Arg real(double v) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::real;
  a.f = v;
  return a;
}

ir::Arg integer(int64_t v) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::integer;
  a.i = v;
  return a;
}

ir::Arg string(std::string_view s) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::string;
  a.s = std::string(s);
  return a;
}

ir::Arg none() { return ir::Arg{}; }

}  // namespace fuselm::fusers
