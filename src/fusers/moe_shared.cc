// The shared-expert reader of the moe fuser (moe_shared.h).
#include "fusers/moe_shared.h"

#include <algorithm>
#include <set>

#include "fusers/moe_router.h"
#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

bool is_view_like(const ir::Node& n) {
  return is_float_cast(n) || n.op == "aten.view.default" || n.op == "aten.reshape.default" ||
         n.op == "aten._unsafe_view.default";
}

int root(const ir::Graph& g, int i) {
  while (i >= 0 && is_view_like(g.nodes[i])) i = ref_arg(g.nodes[i], 0);
  return i;
}

// aten.linear(v, W) without bias, W a 2-d parameter, v viewing `x`: W's node, else -1.
int plain_linear(const ir::Graph& g, int i, int x, std::vector<int>& branch) {
  const ir::Node* n = node_of(g, i);
  if (!n || n->op != "aten.linear.default" || ref_arg(*n, 2) >= 0) return -1;
  const int w = ref_arg(*n, 1);
  if (!is_parameter(g, w) || g.nodes[w].out.shape.size() != 2 || root(g, ref_arg(*n, 0)) != x) return -1;
  branch.push_back(i);
  return w;
}

std::string act_of(const ir::Node& n) {
  if (n.op == "aten.silu.default") return "silu";
  if (n.op == "aten.relu.default") return "relu";
  if (n.op == "aten.gelu.default")
    return n.args.size() > 1 && n.args[1].kind == ir::Arg::Kind::string && n.args[1].s == "tanh" ? "gelu_tanh" : "gelu";
  return "";
}

}  // namespace

SharedExpert read_shared(const ir::Graph& g, const Subgraph& sg, int experts, int x) {
  SharedExpert s;
  x = root(g, x);
  // The add that sums the experts' output (through views) with another branch.
  int from = experts, other = -1;
  for (int hops = 0; hops < 8 && s.add < 0; ++hops) {
    int next = -1;
    for (int u : sg.users_of(from)) {
      if (!sg.contains(u)) continue;
      const ir::Node& n = g.nodes[u];
      if (n.op == "aten.add.Tensor" && ref_arg(n, 0) >= 0 && ref_arg(n, 1) >= 0) {
        s.add = u;
        other = ref_arg(n, ref_arg(n, 0) == from ? 1 : 0);
      } else if (is_view_like(n)) {
        next = u;
      }
    }
    if (next < 0) break;
    from = next;
  }
  if (s.add < 0) return s;
  std::vector<int> branch;  // every node of the shared branch, for the readers check below
  int y = root(g, other);
  s.kind = "ungated";
  if (const ir::Node* m = node_of(g, y); m && m->op == "aten.mul.Tensor") {
    for (int side = 0; side < 2 && s.scale < 0; ++side) {
      const ir::Node* sig = node_of(g, ref_arg(*m, side));
      if (!sig || sig->op != "aten.sigmoid.default") continue;
      const int w = plain_linear(g, ref_arg(*sig, 0), x, branch);
      if (w < 0 || static_dim(g.nodes[w].out, 0) != 1) continue;
      s.scale = w;
      s.kind = "gated";
      branch.push_back(y);
      branch.push_back(ref_arg(*m, side));
      y = root(g, ref_arg(*m, 1 - side));
    }
  }
  const ir::Node* down = node_of(g, y);
  if (down && down->op == "aten.linear.default" && ref_arg(*down, 2) < 0 && is_parameter(g, ref_arg(*down, 1)) &&
      g.nodes[ref_arg(*down, 1)].out.shape.size() == 2) {
    s.down = ref_arg(*down, 1);
    branch.push_back(y);
  }
  if (s.down < 0) {
    s.declined = "the shared branch does not end in a linear without bias";
    return s;
  }
  const int h = root(g, ref_arg(*down, 0));
  const ir::Node* hn = node_of(g, h);
  if (hn && hn->op == "aten.mul.Tensor") {  // GLU: act(gate(x)) * up(x), either order
    for (int side = 0; side < 2 && s.up < 0; ++side) {
      const ir::Node* a = node_of(g, ref_arg(*hn, side));
      if (!a || act_of(*a).empty()) continue;
      std::vector<int> tried = branch;
      const int gw = plain_linear(g, ref_arg(*a, 0), x, tried);
      const int uw = plain_linear(g, ref_arg(*hn, 1 - side), x, tried);
      if (gw < 0 || uw < 0) continue;
      s.gate = gw;
      s.up = uw;
      s.act = act_of(*a);
      s.glu_mul = h;
      branch = tried;
      branch.push_back(h);
      branch.push_back(ref_arg(*hn, side));
    }
  } else if (hn && !act_of(*hn).empty()) {  // plain MLP: act(up(x))
    s.up = plain_linear(g, ref_arg(*hn, 0), x, branch);
    s.act = act_of(*hn);
    branch.push_back(h);
  }
  if (s.up < 0) {
    s.declined = "the shared expert is neither act(gate(x)) * up(x) nor act(up(x)) before its down projection";
    return s;
  }
  const int64_t hidden = static_dim(g.nodes[s.down].out, 0).value_or(-1), inner = static_dim(g.nodes[s.down].out, 1).value_or(-1);
  if (static_dim(g.nodes[s.up].out, 0) != inner || (s.gate >= 0 && static_dim(g.nodes[s.gate].out, 0) != inner) ||
      static_dim(g.nodes[s.up].out, 1) != hidden) {
    s.declined = "the shared expert's widths do not chain";
    return s;
  }
  // Nothing else may read the branch (it dies when the add is replaced), and the add must be what
  // the block returns: any other module mixed in is not accounted for.
  std::set<int> mine(branch.begin(), branch.end());
  for (int b : branch)
    for (int u : sg.users_of(b))
      if (!mine.count(u) && u != s.add && !is_view_like(g.nodes[u])) {
        s.declined = "a value of the shared expert is read outside it";
        return s;
      }
  int out = s.add;
  for (bool more = true; more;) {
    more = false;
    for (int u : sg.users_of(out))
      if (sg.contains(u) && is_view_like(g.nodes[u])) {
        out = u;
        more = true;
        break;
      }
  }
  bool only_views = true;
  for (int u : sg.users_of(s.add)) only_views = only_views && (!sg.contains(u) || is_view_like(g.nodes[u]));
  if (std::find(sg.outputs.begin(), sg.outputs.end(), out) == sg.outputs.end() || !only_views) {
    s.declined = "the block combines the experts with more than its shared expert";
    return s;
  }
  return s;
}

}  // namespace fuselm::fusers
