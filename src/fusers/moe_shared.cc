// The shared-expert reader of the moe fuser (moe_shared.h).
#include "fusers/moe_shared.h"

#include <algorithm>
#include <set>

#include "fusers/moe_router.h"
#include "fusers/pattern.h"

namespace fuselm::fusers {
namespace {

bool is_view_like(const ir::Node& n) {
  return is_float_cast(n) || is_reshape(n);
}

int root(const ir::Graph& g, int i) {
  while (i >= 0 && is_view_like(g.nodes[i])) i = ref_arg(g.nodes[i], 0);
  return i;
}

// aten.linear(v, W) without bias, W a 2-d parameter, v viewing `x`: W's node, else -1.
int plain_linear(const ir::Graph& g, int i, int x, std::vector<int>& branch) {
  const ir::Node* n = node_of(g, i);
  if (!n || n->op != ops::linear || ref_arg(*n, 2) >= 0) return -1;
  const int w = ref_arg(*n, 1);
  if (!is_parameter(g, w) || g.nodes[w].out.shape.size() != 2 || root(g, ref_arg(*n, 0)) != x) return -1;
  branch.push_back(i);
  return w;
}

std::string act_of(const ir::Node& n) {
  if (n.op == ops::silu) return "silu";
  if (n.op == ops::relu) return "relu";
  if (n.op == ops::gelu)
    return n.args.size() > 1 && n.args[1].kind == ir::Arg::Kind::string && n.args[1].s == "tanh" ? "gelu_tanh" : "gelu";
  return "";
}

// The add that sums the experts' output (through views) with another branch: sets s.add and
// returns the other branch's value (-1 when there is no such add).
int find_sum(const ir::Graph& g, const Subgraph& sg, int experts, SharedExpert& s) {
  int from = experts, other = -1;
  for (int hops = 0; hops < 8 && s.add < 0; ++hops) {
    int next = -1;
    for (int u : sg.users_of(from)) {
      if (!sg.contains(u)) continue;
      const ir::Node& n = g.nodes[u];
      if (n.op == ops::add && ref_arg(n, 0) >= 0 && ref_arg(n, 1) >= 0) {
        s.add = u;
        other = ref_arg(n, ref_arg(n, 0) == from ? 1 : 0);
      } else if (is_view_like(n)) {
        next = u;
      }
    }
    if (next < 0) break;
    from = next;
  }
  return other;
}

// sigmoid(gate(x)) * y: sets s.scale and s.kind ("gated") and returns y, else returns y as it is.
int read_shared_scale(const ir::Graph& g, int x, int y, SharedExpert& s, std::vector<int>& branch) {
  const ir::Node* m = node_of(g, y);
  if (!m || m->op != ops::mul) return y;
  for (int side = 0; side < 2 && s.scale < 0; ++side) {
    const ir::Node* sig = node_of(g, ref_arg(*m, side));
    if (!sig || sig->op != ops::sigmoid) continue;
    const int w = plain_linear(g, ref_arg(*sig, 0), x, branch);
    if (w < 0 || static_dim(g.nodes[w].out, 0) != 1) continue;
    s.scale = w;
    s.kind = "gated";
    branch.push_back(y);
    branch.push_back(ref_arg(*m, side));
    y = root(g, ref_arg(*m, 1 - side));
  }
  return y;
}

// The down projection's input h: act(gate(x)) * up(x) (either order) or act(up(x)); sets s.up
// (and s.gate, s.act, s.glu_mul).
void read_shared_hidden(const ir::Graph& g, int x, int h, SharedExpert& s, std::vector<int>& branch) {
  const ir::Node* hn = node_of(g, h);
  if (hn && hn->op == ops::mul) {  // GLU: act(gate(x)) * up(x), either order
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
}

// Nothing else may read the branch (it dies when the add is replaced), and the add must be what
// the block returns: any other module mixed in is not accounted for. The reason, or "" when closed.
const char* branch_not_closed(const ir::Graph& g, const Subgraph& sg, const SharedExpert& s,
                              const std::vector<int>& branch) {
  std::set<int> mine(branch.begin(), branch.end());
  for (int b : branch)
    for (int u : sg.users_of(b))
      if (!mine.count(u) && u != s.add && !is_view_like(g.nodes[u])) return "a value of the shared expert is read outside it";
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
  if (std::find(sg.outputs.begin(), sg.outputs.end(), out) == sg.outputs.end() || !only_views)
    return "the block combines the experts with more than its shared expert";
  return "";
}

}  // namespace

SharedExpert read_shared(const ir::Graph& g, const Subgraph& sg, int experts, int x) {
  SharedExpert s;
  x = root(g, x);
  const int other = find_sum(g, sg, experts, s);
  if (s.add < 0) return s;
  std::vector<int> branch;  // every node of the shared branch, for the readers check
  s.kind = "ungated";
  const int y = read_shared_scale(g, x, root(g, other), s, branch);
  const ir::Node* down = node_of(g, y);
  if (down && down->op == ops::linear && ref_arg(*down, 2) < 0 && is_parameter(g, ref_arg(*down, 1)) &&
      g.nodes[ref_arg(*down, 1)].out.shape.size() == 2) {
    s.down = ref_arg(*down, 1);
    branch.push_back(y);
  }
  if (s.down < 0) {
    s.declined = "the shared branch does not end in a linear without bias";
    return s;
  }
  read_shared_hidden(g, x, root(g, ref_arg(*down, 0)), s, branch);
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
  s.declined = branch_not_closed(g, sg, s, branch);
  return s;
}

}  // namespace fuselm::fusers
