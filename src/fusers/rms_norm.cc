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

class RmsNormFuser final : public Fuser {
 public:
  std::string_view name() const override { return "rms_norm"; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto rs = sg.own_of("aten.rsqrt.default");
    if (rs.empty()) return why.not_applicable();
    if (rs.size() != 1) return why.reject("expected one rsqrt in the module, found {}", rs.size());
    std::vector<int> covered{rs[0]};
    const int rsqrt = rs[0];

    // rsqrt(mean + eps)
    const int add = ref_arg(g.nodes[rsqrt], 0);
    if (add < 0 || !sg.owns(add) || g.nodes[add].op != "aten.add.Tensor")
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
    covered.push_back(add);
    const ir::Node& mn = g.nodes[mean];
    if (mn.op.rfind("aten.var", 0) == 0)
      return why.reject("rsqrt of a variance ({}): a mean-subtracting norm (LayerNorm), not an RMSNorm", mn.op);
    if (mn.op != "aten.mean.dim" || !sg.owns(mean))
      return why.reject("expected mean(x², -1, keepdim) + eps, found {}", mn.op);
    const auto& dims = mn.args.size() > 1 ? mn.args[1] : ir::Arg{};
    const int64_t nd = static_cast<int64_t>(mn.out.shape.size());
    const bool last_dim = dims.kind == ir::Arg::Kind::list && dims.list.size() == 1 &&
                          dims.list[0].kind == ir::Arg::Kind::integer &&
                          (dims.list[0].i == -1 || dims.list[0].i == nd - 1);
    if (!last_dim) return why.reject("the mean is not over the last dimension alone");
    if (mn.args.size() < 3 || mn.args[2].kind != ir::Arg::Kind::boolean || !mn.args[2].b)
      return why.reject("the mean does not keep its dimension");
    covered.push_back(mean);

    // x² = pow(x, 2) | x · x
    const int sq = ref_arg(mn, 0);
    if (sq < 0 || !sg.owns(sq)) return why.reject("expected the mean of a square computed in the module");
    const ir::Node& sn = g.nodes[sq];
    int x0 = -1;
    if (sn.op == "aten.pow.Tensor_Scalar" && number_arg(sn, 1).value_or(0) == 2.0) x0 = ref_arg(sn, 0);
    else if (sn.op == "aten.mul.Tensor" && ref_arg(sn, 0) >= 0 && ref_arg(sn, 0) == ref_arg(sn, 1)) x0 = ref_arg(sn, 0);
    if (x0 < 0) return why.reject("expected mean(x²), the mean reads {}", sn.op);
    covered.push_back(sq);
    const int x = strip_casts(g, x0, &sg, &covered);
    if (g.nodes[x].op == "aten.sub.Tensor")
      return why.reject("x - mean(x) is squared: a mean-subtracting norm (LayerNorm), not an RMSNorm");

    // x · rsqrt(...)
    const auto& ru = sg.users_of(rsqrt);
    if (ru.size() != 1 || g.nodes[ru[0]].op != "aten.mul.Tensor")
      return why.reject("expected rsqrt(...) to be used once, by x · rsqrt(...)");
    int cur = ru[0];
    const ir::Node& mul = g.nodes[cur];
    const int other = ref_arg(mul, 0) == rsqrt ? ref_arg(mul, 1) : ref_arg(mul, 0);
    if (other < 0 || strip_casts(g, other, &sg, &covered) != x)
      return why.reject("rsqrt(mean(x²) + eps) multiplies another value than x");
    covered.push_back(cur);

    // Casts, at most one weight product, casts.
    int weight = -1;
    double offset = 0.0;
    for (;;) {
      const auto& us = sg.users_of(cur);
      if (us.size() != 1 || !sg.owns(us[0])) break;
      const ir::Node& u = g.nodes[us[0]];
      if (is_float_cast(u) && ref_arg(u, 0) == cur) {
        covered.push_back(us[0]);
        cur = us[0];
        continue;
      }
      if (weight >= 0 || u.op != "aten.mul.Tensor") break;
      const int w_expr = ref_arg(u, 0) == cur ? ref_arg(u, 1) : ref_arg(u, 0);
      if (w_expr < 0) break;
      std::vector<int> wcov;
      int w = strip_casts(g, w_expr, &sg, &wcov);
      double off = 0.0;
      if (w >= 0 && g.nodes[w].op == "aten.add.Tensor" && sg.owns(w)) {
        const ir::Node& wa = g.nodes[w];
        const int r = ref_arg(wa, 0) >= 0 ? ref_arg(wa, 0) : ref_arg(wa, 1);
        const auto c = ref_arg(wa, 0) >= 0 ? number_arg(wa, 1) : number_arg(wa, 0);
        if (!c || number_arg(wa, 2).value_or(1.0) != 1.0) break;
        off = *c;
        wcov.push_back(w);
        w = strip_casts(g, r, &sg, &wcov);
      }
      if (!is_parameter(g, w) || g.nodes[w].out.shape.size() != 1)
        return why.reject("the normalized value is multiplied by {} , not by a 1-d weight (gated norm?)",
                          g.nodes[w_expr].op);
      weight = w;
      offset = off;
      covered.insert(covered.end(), wcov.begin(), wcov.end());
      covered.push_back(us[0]);
      cur = us[0];
    }
    std::sort(covered.begin(), covered.end());
    for (int n : sg.own)
      if (!std::binary_search(covered.begin(), covered.end(), n))
        return why.reject("the module also computes {} ('{}'): not a plain RMSNorm (gated?)", g.nodes[n].op,
                          g.nodes[n].name);

    Fusion f;
    NewNode nn;
    nn.op = "fuselm.rms_norm.default";
    nn.args = {ref(x), weight >= 0 ? ref(weight) : none(), real(*eps), real(offset)};
    nn.out = g.nodes[cur].out;
    f.nodes.push_back(nn);
    f.replaces.push_back({cur, new_ref(0)});
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

}  // namespace fuselm::fusers
