// The match cache: one match per (fuser, module class, signature), refs made local to the
// subgraph so that one cached plan serves every instance with the same structure and shapes.
#include <algorithm>
#include <stdexcept>

#include "fusers/driver.h"

namespace fuselm::fusers::driver {
namespace {

constexpr int kInput = 1 << 29;

// Shapes are part of the key: a plan's metas, split sizes and stacked widths are those of the
// instance it was matched on (q and k norms of one class differ in heads under GQA).
void append_meta(std::string& s, const ir::TensorMeta& t) {
  s += ir::dtype_name(t.dtype);
  s += "[";
  for (const auto& d : t.shape) s += (d.symbolic() ? d.expr : std::to_string(d.value)) + ",";
  s += "]";
}

void append_arg(std::string& s, const Subgraph& sg, const ir::Arg& a) {
  using K = ir::Arg::Kind;
  switch (a.kind) {
    case K::none: s += "_"; break;
    case K::boolean: s += a.b ? "T" : "F"; break;
    case K::integer: s += std::to_string(a.i); break;
    case K::real: s += fmt::format("{:a}", a.f); break;
    case K::string: s += "'" + a.s + "'"; break;
    case K::sym: s += "$" + a.s; break;
    case K::dtype: s += "d" + std::string(ir::dtype_name(a.dtype)); break;
    case K::device: s += "@"; break;
    case K::ref: {
      auto it = std::lower_bound(sg.nodes.begin(), sg.nodes.end(), a.ref);
      if (it != sg.nodes.end() && *it == a.ref) {
        s += "n" + std::to_string(it - sg.nodes.begin());
      } else {
        auto in = std::find(sg.inputs.begin(), sg.inputs.end(), a.ref);
        const auto& src = sg.graph->nodes[a.ref];
        s += "i" + std::to_string(in - sg.inputs.begin()) + ":" +
             (src.op == "placeholder" ? src.placeholder_kind : std::string("v"));
        append_meta(s, src.out);
      }
      break;
    }
    case K::list:
      s += "[";
      for (const auto& x : a.list) append_arg(s, sg, x), s += ",";
      s += "]";
      break;
  }
}

}  // namespace

std::string signature(const Subgraph& sg) {
  std::string s;
  for (int i : sg.nodes) {
    const auto& n = sg.graph->nodes[i];
    s += n.op;
    s += sg.owns(i) ? "*(" : "(";
    for (const auto& a : n.args) append_arg(s, sg, a), s += ",";
    s += ")";
    append_meta(s, n.out);
    for (const auto& o : n.outs) append_meta(s, o);
    s += ";";
  }
  return s;
}

const MatchCache::Entry& MatchCache::lookup(const Fuser& fuser, const Subgraph& sg, const std::string& sig, bool& hit) {
  const std::string key = std::string(fuser.name()) + "|" + sg.mod().cls + "|" + sig;
  auto it = entries_.find(key);
  hit = it != entries_.end();
  if (hit) return it->second;
  Entry e;
  e.fusion = fuser.match(sg, e.why);
  if (e.fusion)  // global refs -> positions in sg.nodes, or kInput + position in sg.inputs
    e.fusion->for_each_ref([&](int& r) {
      if (r >= kNewNode) return;
      auto n = std::lower_bound(sg.nodes.begin(), sg.nodes.end(), r);
      if (n != sg.nodes.end() && *n == r) {
        r = static_cast<int>(n - sg.nodes.begin());
        return;
      }
      auto in = std::find(sg.inputs.begin(), sg.inputs.end(), r);
      if (in == sg.inputs.end()) throw std::logic_error("a fusion refers to a value outside its subgraph's reach");
      r = kInput + static_cast<int>(in - sg.inputs.begin());
    });
  return entries_.emplace(key, std::move(e)).first->second;
}

Fusion MatchCache::instantiate(const Fusion& cached, const Subgraph& sg) {
  Fusion f = cached;
  f.for_each_ref([&](int& r) {
    if (r >= kNewNode) return;
    r = r >= kInput ? sg.inputs.at(r - kInput) : sg.nodes.at(r);
  });
  return f;
}

}  // namespace fuselm::fusers::driver
