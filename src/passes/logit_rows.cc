#include "passes/logit_rows.h"

#include <fmt/core.h>

#include <functional>

#include "ir/op_traits.h"

namespace fuselm::passes {
namespace {

// The shard plan's gather of a vocab-parallel head's logits (ir/op_defs.h).
constexpr std::string_view kAllGather = "fuselm.all_gather.default";
// What this pass puts in.
constexpr std::string_view kSelectRows = "fuselm.select_rows.default";

bool has_ref(const ir::Arg& a) {
  if (a.kind == ir::Arg::Kind::ref) return true;
  for (const auto& x : a.list)
    if (has_ref(x)) return true;
  return false;
}

void shift_refs(ir::Arg& a, int from) {
  if (a.kind == ir::Arg::Kind::ref && a.ref >= from) ++a.ref;
  for (auto& x : a.list) shift_refs(x, from);
}

// [1, tok, width] with a static width (width < 0: any).
bool is_token_rows(const ir::TensorMeta& m, const std::string& tok, int64_t width) {
  if (m.shape.size() != 3 || m.shape[0].symbolic() || m.shape[0].value != 1) return false;
  if (m.shape[1].expr != tok || m.shape[2].symbolic()) return false;
  return width < 0 || m.shape[2].value == width;
}

bool token_independent(const ir::Graph& g, const ir::Arg& a) {
  if (a.is_none()) return true;
  if (a.kind != ir::Arg::Kind::ref) return false;
  const auto& n = g.nodes[a.ref];
  if (n.out_kind != ir::Node::Out::tensor) return false;
  for (const auto& d : n.out.shape)
    if (d.symbolic()) return false;
  return true;
}

std::string token_symbol(const ir::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op == "placeholder" && n.placeholder_kind == "input" && n.target == "input_ids" && n.out.shape.size() == 2 &&
        n.out.shape[1].symbolic())
      return n.out.shape[1].expr;
  return {};
}

int count_users(const ir::Graph& g, int idx) {
  int users = 0;
  std::function<void(const ir::Arg&)> visit = [&](const ir::Arg& a) {
    if (a.kind == ir::Arg::Kind::ref && a.ref == idx) ++users;
    for (const auto& x : a.list) visit(x);
  };
  for (const auto& n : g.nodes)
    for (const auto& a : n.args) visit(a);
  for (int o : g.outputs)
    if (o == idx) ++users;
  return users;
}

// The index of the head product behind the first output, or -1 with the reason.
int find_head(const ir::Graph& g, const std::string& tok, int64_t vocab, std::string& why) {
  int cur = g.outputs.front();
  for (;;) {
    const auto& n = g.nodes[cur];
    if (n.out_kind != ir::Node::Out::tensor || !is_token_rows(n.out, tok, vocab)) {
      why = fmt::format("node '{}' ({}) is not [1, {}, {}]", n.name, n.op, tok, vocab);
      return -1;
    }
    const ir::OpTraits& t = ir::op_traits(n.op);
    if (t.row_product) {
      if (count_users(g, cur) == 1) return cur;
      why = fmt::format("the head's output '{}' is also read elsewhere", n.name);
      return -1;
    }
    // A vocab-parallel LM head (the shard plan) gathers its local logits into the vocabulary:
    // the product behind it gives this rank's columns.
    if (n.op == kAllGather) vocab = -1;
    else if (!t.rowwise) {
      why = fmt::format("node '{}' ({}) between the head and the output is not known to act row by row", n.name, n.op);
      return -1;
    }
    int next = -1;
    for (size_t k = 0; k < n.args.size(); ++k) {
      if (!has_ref(n.args[k])) continue;
      if (next >= 0 || n.args[k].kind != ir::Arg::Kind::ref) {
        why = fmt::format("node '{}' ({}) reads more than one tensor", n.name, n.op);
        return -1;
      }
      next = n.args[k].ref;
    }
    if (next < 0 || count_users(g, next) != 1) {
      why = fmt::format("the value read by node '{}' is also read elsewhere", n.name);
      return -1;
    }
    cur = next;
  }
}

}  // namespace

bool select_sampled_rows(ir::Graph& g, int64_t vocab_size, std::string& why) {
  if (g.outputs.empty()) {
    why = "the graph has no output";
    return false;
  }
  const std::string tok = token_symbol(g);
  if (tok.empty()) {
    why = "the graph has no input_ids input of shape [1, tokens]";
    return false;
  }
  const int head = find_head(g, tok, vocab_size, why);
  if (head < 0) return false;
  const auto& h = g.nodes[head];
  if (h.args.size() < 2 || h.args[0].kind != ir::Arg::Kind::ref) {
    why = fmt::format("head node '{}' does not read a tensor first", h.name);
    return false;
  }
  const auto& x = g.nodes[h.args[0].ref];
  if (x.op == kSelectRows) return true;
  if (x.out_kind != ir::Node::Out::tensor || !is_token_rows(x.out, tok, -1)) {
    why = fmt::format("the head's input '{}' is not [1, {}, hidden]", x.name, tok);
    return false;
  }
  for (size_t k = 1; k < h.args.size(); ++k)
    if (!token_independent(g, h.args[k])) {
      why = fmt::format("argument {} of head node '{}' depends on the tokens", k, h.name);
      return false;
    }
  // Insert the selection right before the head: later indices (and refs to them) move up by one.
  ir::Node sel;
  sel.op = kSelectRows;
  sel.name = "fuselm_select_rows";
  while (g.index_by_name.contains(sel.name)) sel.name += "_";
  sel.args.resize(1);
  sel.args[0].kind = ir::Arg::Kind::ref;
  sel.args[0].ref = x.index;
  sel.out_kind = ir::Node::Out::tensor;
  sel.out = x.out;
  sel.out.shape[1].expr = "fuselm_sampled_rows";  // not a graph symbol: no op reads it
  sel.module_stack = h.module_stack;
  for (auto& n : g.nodes)
    for (auto& a : n.args) shift_refs(a, head);
  for (int& o : g.outputs)
    if (o >= head) ++o;
  g.nodes.insert(g.nodes.begin() + head, std::move(sel));
  g.nodes[head + 1].args[0].ref = head;
  g.index_by_name.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    g.nodes[i].index = static_cast<int>(i);
    g.index_by_name[g.nodes[i].name] = static_cast<int>(i);
  }
  g.op_args[std::string(kSelectRows)] = {"input"};
  return true;
}

int selected_hidden_node(const ir::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op == kSelectRows) return n.index;
  return -1;
}

}  // namespace fuselm::passes
