// Attention sites and KV layers: one source of truth for what the engine's KV cache holds.
#include <algorithm>
#include <map>

#include "fusers/driver.h"
#include "ir/op_defs.h"

namespace fuselm::fusers {
namespace {

std::string module_of(const ir::Graph& g, const ir::Node& n) {
  return n.module_stack.empty() ? "<root>" : g.modules[n.module_stack.back()].path;
}

// The op's rows per token, from the operands its definition names.
KvLayer rows_of(const ir::Graph& g, const ir::Node& n, const ir::OpDef& def, std::vector<std::string>& errors) {
  auto operand = [&](std::string_view name) -> const std::vector<ir::Dim>& {
    return g.nodes[n.args.at(def.arg(name)).ref].out.shape;
  };
  KvLayer l;
  l.module = module_of(g, n);
  if (def.kv == ir::KvRows::latent) {
    const auto& lat = operand("latent");
    const auto& rot = operand("k_rot");
    if (lat.empty() || rot.empty() || lat.back().symbolic() || rot.back().symbolic())
      errors.push_back(fmt::format("latent attention in module {}: latent/rope widths are not static", l.module));
    else l.k_width = lat.back().value + rot.back().value, l.k_head = lat.back().value;
    l.latent = true;
    return l;
  }
  const auto& k = operand("k");
  const auto& v = operand("v");
  if (k.size() != 4 || v.size() != 4 || k[1].symbolic() || k[3].symbolic() || v[1].symbolic() || v[3].symbolic())
    errors.push_back(fmt::format("attention in module {}: k/v head shapes are not static", l.module));
  else l.k_width = k[1].value * k[3].value, l.v_width = v[1].value * v[3].value, l.k_head = k[3].value, l.v_head = v[3].value;
  return l;
}

bool same_arg(const ir::Arg& a, const ir::Arg& b) {
  return a.kind == b.kind && a.i == b.i && a.f == b.f && a.s == b.s && a.ref == b.ref && a.list.empty() &&
         b.list.empty();
}

// Whether two ops may share one cache layer: they write the same rows (the very same k and v
// values, or latent and rope key) and read them under the same mask. Gemma 3n's and 4's last
// layers attend over the K/V an earlier layer made (KV sharing): the second write stores the same
// values again, and the layer's cache is held once.
bool shares_rows(const ir::Node& a, const ir::Node& b, const ir::OpDef& def) {
  if (a.op != b.op) return false;
  const bool latent = def.kv == ir::KvRows::latent;
  for (std::string_view name : {latent ? "latent" : "k", latent ? "k_rot" : "v"}) {
    const size_t i = def.arg(name);
    if (i >= a.args.size() || i >= b.args.size() || a.args[i].kind != ir::Arg::Kind::ref ||
        !same_arg(a.args[i], b.args[i]))
      return false;
  }
  for (std::string_view name : {"sliding_window", "chunk_size", "mask"}) {
    if (std::find(def.args.begin(), def.args.end(), name) == def.args.end()) continue;
    const size_t i = def.arg(name);
    const ir::Arg none{};
    if (!same_arg(i < a.args.size() ? a.args[i] : none, i < b.args.size() ? b.args[i] : none)) return false;
  }
  return true;
}

// The error for a second op of layer index idx (first: the index's first op, whose layer is
// `have`), or "" when it shares the first op's rows.
std::string second_writer_error(const ir::Node& first, const ir::Node& n, const ir::OpDef& def, int64_t idx,
                                const KvLayer& have, const KvLayer& l) {
  if (shares_rows(first, n, def)) return "";
  if (have.module != l.module)
    return fmt::format("layer index {} is claimed by two attention modules: {} and {}", idx, have.module, l.module);
  // differential attention and the like: two K/V sets would share one cache layer
  return fmt::format("module {} calls attention twice for layer index {}: the KV cache holds one K/V per layer",
                     l.module, idx);
}

}  // namespace

std::vector<KvLayer> kv_layers(const ir::Graph& g, std::vector<std::string>& errors) {
  std::map<int64_t, KvLayer> layers;
  std::map<int64_t, const ir::Node*> writer;  // the first op of each layer index
  for (const auto& n : g.nodes) {
    const ir::OpDef* def = ir::find_op_def(n.op);
    if (!def || def->kv == ir::KvRows::none) continue;
    const auto& la = n.args.size() > def->arg(def->layer) ? n.args[def->arg(def->layer)] : ir::Arg{};
    if (la.kind != ir::Arg::Kind::integer || la.i < 0) {
      errors.push_back(fmt::format("attention in module {} has no layer index (no layer_idx attribute or argument)",
                                   module_of(g, n)));
      continue;
    }
    KvLayer l = rows_of(g, n, *def, errors);
    auto [it, fresh] = layers.emplace(la.i, l);
    if (fresh) {
      writer[la.i] = &n;
      continue;
    }
    if (std::string e = second_writer_error(*writer[la.i], n, *def, la.i, it->second, l); !e.empty())
      errors.push_back(std::move(e));
  }
  // A hybrid numbers its attention by the model's layer index (only layers 3, 7, 11 attend): an
  // index no attention serves is a recurrent layer and holds no KV rows. Without stateful ops a
  // gap means an attention the capture did not find, and is refused.
  const bool stateful = std::any_of(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) {
    const ir::OpDef* def = ir::find_op_def(n.op);
    return def && !def->state.empty();
  });
  std::vector<KvLayer> out;
  for (const auto& [idx, l] : layers) {
    if (idx != static_cast<int64_t>(out.size()) && !stateful) {
      errors.push_back(fmt::format("no attention module serves layer index {} (the next, {}, is served by {})",
                                   out.size(), idx, l.module));
      break;
    }
    out.resize(static_cast<size_t>(idx));  // the unserved indices: no rows
    out.push_back(l);
  }
  return out;
}

namespace driver {

std::vector<AttentionSite> attention_sites(const std::vector<Accepted>& accepted) {
  std::vector<AttentionSite> sites;
  for (const auto& a : accepted) {
    for (const auto& s : a.fusion.attention) {
      if (sites.size() <= static_cast<size_t>(s.layer)) sites.resize(s.layer + 1);
      if (sites[s.layer].layer < 0) sites[s.layer] = s;
    }
  }
  return sites;
}

}  // namespace driver
}  // namespace fuselm::fusers
