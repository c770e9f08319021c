// RMSNorm   y = x · rsqrt(mean(x², -1, keepdim) + eps) [· w | · (1 + w)]
//           →  fuselm.rms_norm(x, w | None, eps, weight_offset)
//   anchor:   the module's own rsqrt
//   x²:       pow(x, 2) or x · x; casts (to.dtype, _to_copy, type_as) may surround x, the normalized
//             value and the weight product (fp32 upcast before, cast back before or after w)
//   w:        a 1-d parameter of the row width, through casts, or 1 + it (weight_offset = 1)
//   rejected: a mean-subtracting norm (LayerNorm), mean over another dim, any other computation in
//             the module (a gated RMSNorm multiplies by silu(gate) before or after)
//   eps and width are each instance's own (eps is a literal of the structure signature, the width
//   is validated per instance). TP: replicated, no weight transform.
#include <algorithm>

#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

// One RMSNorm as it is read, step by step (each step a function below).
struct Norm {
  int rsqrt = -1, mean = -1, x = -1;
  int cur = -1;  // the last node of the norm read so far (its output is replaced)
  double eps = 0.0, offset = 0.0;
  int weight = -1;
  std::vector<int> covered;  // the module's nodes the norm is made of
};

// rsqrt(mean(·, -1, keepdim) + eps): sets eps and mean.
bool read_mean_eps(const Subgraph& sg, Norm& nm, Why& why) {
  const ir::Graph& g = *sg.graph;
  const int add = ref_arg(g.nodes[nm.rsqrt], 0);
  if (add < 0 || !sg.owns(add) || g.nodes[add].op != ops::add)
    return why.reject("expected rsqrt(mean(x²) + eps), rsqrt reads {}", add < 0 ? "a literal" : g.nodes[add].op);
  const ir::Node& an = g.nodes[add];
  int mean = ref_arg(an, 0);
  auto eps = number_arg(an, 1);
  if (mean < 0 || !eps) {
    mean = ref_arg(an, 1);
    eps = number_arg(an, 0);
  }
  if (mean < 0 || !eps) return why.reject("expected mean(x²) + eps with a literal eps");
  if (number_arg(an, 2).value_or(1.0) != 1.0) return why.reject("eps is added with alpha != 1");
  nm.covered.push_back(add);
  const ir::Node& mn = g.nodes[mean];
  if (mn.op.rfind(ops::var_prefix, 0) == 0)
    return why.reject("rsqrt of a variance ({}): a mean-subtracting norm (LayerNorm), not an RMSNorm", mn.op);
  if (mn.op != ops::mean || !sg.owns(mean)) return why.reject("expected mean(x², -1, keepdim) + eps, found {}", mn.op);
  const auto& dims = mn.args.size() > 1 ? mn.args[1] : ir::Arg{};
  const int64_t nd = static_cast<int64_t>(mn.out.shape.size());
  const bool last_dim = dims.kind == ir::Arg::Kind::list && dims.list.size() == 1 &&
                        dims.list[0].kind == ir::Arg::Kind::integer &&
                        (dims.list[0].i == -1 || dims.list[0].i == nd - 1);
  if (!last_dim) return why.reject("the mean is not over the last dimension alone");
  if (mn.args.size() < 3 || mn.args[2].kind != ir::Arg::Kind::boolean || !mn.args[2].b)
    return why.reject("the mean does not keep its dimension");
  nm.covered.push_back(mean);
  nm.mean = mean;
  nm.eps = *eps;
  return true;
}

// x² = pow(x, 2) | x · x under the mean, then x · rsqrt(...): sets x and cur.
bool read_square_and_scale(const Subgraph& sg, Norm& nm, Why& why) {
  const ir::Graph& g = *sg.graph;
  const int sq = ref_arg(g.nodes[nm.mean], 0);
  if (sq < 0 || !sg.owns(sq)) return why.reject("expected the mean of a square computed in the module");
  const ir::Node& sn = g.nodes[sq];
  int x0 = -1;
  if (sn.op == ops::pow && number_arg(sn, 1).value_or(0) == 2.0) x0 = ref_arg(sn, 0);
  else if (sn.op == ops::mul && ref_arg(sn, 0) >= 0 && ref_arg(sn, 0) == ref_arg(sn, 1)) x0 = ref_arg(sn, 0);
  if (x0 < 0) return why.reject("expected mean(x²), the mean reads {}", sn.op);
  nm.covered.push_back(sq);
  nm.x = strip_casts(g, x0, &sg, &nm.covered);
  if (g.nodes[nm.x].op == ops::sub)
    return why.reject("x - mean(x) is squared: a mean-subtracting norm (LayerNorm), not an RMSNorm");
  const auto& ru = sg.users_of(nm.rsqrt);
  if (ru.size() != 1 || g.nodes[ru[0]].op != ops::mul)
    return why.reject("expected rsqrt(...) to be used once, by x · rsqrt(...)");
  nm.cur = ru[0];
  const ir::Node& mul = g.nodes[nm.cur];
  const int other = ref_arg(mul, 0) == nm.rsqrt ? ref_arg(mul, 1) : ref_arg(mul, 0);
  if (other < 0 || strip_casts(g, other, &sg, &nm.covered) != nm.x)
    return why.reject("rsqrt(mean(x²) + eps) multiplies another value than x");
  nm.covered.push_back(nm.cur);
  return true;
}

// The weight of the product `u` of the normalized value `cur`: a 1-d parameter through casts, or
// 1 + it. -1 when the product is not one the norm may end with (the norm ends before it),
// -2 when it multiplies by something other than a weight (rejected).
int read_weight_product(const Subgraph& sg, int cur, const ir::Node& u, double& off, std::vector<int>& wcov) {
  const ir::Graph& g = *sg.graph;
  const int w_expr = ref_arg(u, 0) == cur ? ref_arg(u, 1) : ref_arg(u, 0);
  if (w_expr < 0) return -1;
  int w = strip_casts(g, w_expr, &sg, &wcov);
  off = 0.0;
  if (w >= 0 && g.nodes[w].op == ops::add && sg.owns(w)) {
    const ir::Node& wa = g.nodes[w];
    const int r = ref_arg(wa, 0) >= 0 ? ref_arg(wa, 0) : ref_arg(wa, 1);
    const auto c = ref_arg(wa, 0) >= 0 ? number_arg(wa, 1) : number_arg(wa, 0);
    if (!c || number_arg(wa, 2).value_or(1.0) != 1.0) return -1;
    off = *c;
    wcov.push_back(w);
    w = strip_casts(g, r, &sg, &wcov);
  }
  if (!is_parameter(g, w) || g.nodes[w].out.shape.size() != 1) return -2;
  return w;
}

// After x · rsqrt(...): casts, at most one weight product, casts. Moves cur to the norm's end.
bool read_weight(const Subgraph& sg, Norm& nm, Why& why) {
  const ir::Graph& g = *sg.graph;
  for (;;) {
    const auto& us = sg.users_of(nm.cur);
    if (us.size() != 1 || !sg.owns(us[0])) break;
    const ir::Node& u = g.nodes[us[0]];
    if (is_float_cast(u) && ref_arg(u, 0) == nm.cur) {
      nm.covered.push_back(us[0]);
      nm.cur = us[0];
      continue;
    }
    if (nm.weight >= 0 || u.op != ops::mul) break;
    std::vector<int> wcov;
    double off = 0.0;
    const int w = read_weight_product(sg, nm.cur, u, off, wcov);
    if (w == -1) break;
    if (w == -2) {
      const int w_expr = ref_arg(u, 0) == nm.cur ? ref_arg(u, 1) : ref_arg(u, 0);
      return why.reject("the normalized value is multiplied by {} , not by a 1-d weight (gated norm?)",
                        g.nodes[w_expr].op);
    }
    nm.weight = w;
    nm.offset = off;
    nm.covered.insert(nm.covered.end(), wcov.begin(), wcov.end());
    nm.covered.push_back(us[0]);
    nm.cur = us[0];
  }
  return true;
}

class RmsNormFuser final : public Fuser {
 public:
  std::string_view name() const override { return "rms_norm"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto rs = sg.own_of(ops::rsqrt);
    if (rs.empty()) return why.not_applicable();
    if (rs.size() != 1) return why.reject("expected one rsqrt in the module, found {}", rs.size());
    Norm nm;
    nm.rsqrt = rs[0];
    nm.covered = {rs[0]};
    if (!read_mean_eps(sg, nm, why) || !read_square_and_scale(sg, nm, why) || !read_weight(sg, nm, why))
      return std::nullopt;
    std::sort(nm.covered.begin(), nm.covered.end());
    for (int n : sg.own)
      if (!std::binary_search(nm.covered.begin(), nm.covered.end(), n))
        return why.reject("the module also computes {} ('{}'): not a plain RMSNorm (gated?)", g.nodes[n].op,
                          g.nodes[n].name);

    Fusion f;
    NewNode nn;
    nn.op = "fuselm.rms_norm.default";
    nn.args = {ref(nm.x), nm.weight >= 0 ? ref(nm.weight) : none(), real(nm.eps), real(nm.offset)};
    nn.out = g.nodes[nm.cur].out;
    f.nodes.push_back(nn);
    f.replaces.push_back({nm.cur, new_ref(0)});
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    const NewNode& nn = f.nodes[0];
    const auto width = static_dim(g.nodes[nn.args[0].ref].out, -1);
    if (!width) return why.reject("the row width is not static");
    const bool has_w = nn.args[1].kind == ir::Arg::Kind::ref;
    if (has_w) {
      const auto w = static_dim(g.nodes[nn.args[1].ref].out, 0);
      if (w != width) return why.reject("weight width {} != row width {}", w.value_or(-1), *width);
    }
    const double off = nn.args[3].f;
    f.detail = fmt::format("eps={:g} width={} weight={}", nn.args[2].f, *width,
                           !has_w ? "none" : off == 0.0 ? "w" : fmt::format("{:g}+w", off));
    return true;
  }
};

}  // namespace

const Fuser& rms_norm_fuser() {
  static const RmsNormFuser f;
  return f;
}

// Registry order 70: a norm module (leaf): never overlaps a GLU's nodes.
[[maybe_unused]] const bool kRegistered = register_fuser(rms_norm_fuser(), 70);

}  // namespace fuselm::fusers
