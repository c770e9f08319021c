// attention (additive)   the fuselm.attention op a module dispatches  →  an engine attention site
//   anchor:   the module's own fuselm.attention ops, one site each (differential attention calls
//             it twice; a shared block or a recurrent stack is one module called in several places)
//   layer:    the op's layer_idx argument: capture numbers the calls in graph order, each its own
//             KV layer (python/fuselm_capture/ops.py, number_attention_calls); an op without one
//             (an older or hand-written IR) takes its module's layer_idx attribute; neither is an
//             error. The resolved layer is written into the op (the KV layers are read from the ops)
//   scale:    the op's scaling argument as passed at the call (OPT passes 1.0, Gemma2
//             query_pre_attn_scalar**-0.5); anything but a number is an error, never a default
//   heads:    from the operands' own shapes: q [1, Hq, T, D], k [1, Hkv, T, D], v [1, Hkv, T, Dv]
//   mask:     the op's mask argument, the kind capture read from the layer's mask function
//             (python/fuselm_capture/masks.py): causal, sliding (sliding_window) or chunked
//             (chunk_size); any other kind is an error naming the module and layer, never a
//             silent causal attention
//   Two modules with one layer index, or an index no module serves, are errors naming both
//   (checked over the rewritten graph's KV layers by the driver, kv_layers.cc).
#include <fmt/ranges.h>

#include "fusers/pattern.h"
#include "ir/op_defs.h"

namespace fuselm::fusers {
namespace {

class AttentionFuser final : public Fuser {
 public:
  std::string_view name() const override { return "attention"; }
  bool additive() const override { return true; }

  std::optional<Fusion> match(const Subgraph& sg, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    auto ops = sg.own_of("fuselm.attention.default");
    if (ops.empty()) return why.not_applicable();
    Fusion f;
    for (int op : ops) {
      auto s = site_of(sg, g.nodes[op], why);
      if (!s) return std::nullopt;
      f.attention.push_back(*s);
      // The op stays; validate writes this instance's resolved layer into it (and reads its operands).
      f.updates.push_back(ArgUpdate{op, std::string(ir::op_def(g.nodes[op].op).layer), integer(-1)});
    }
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    std::vector<std::string> details;
    for (size_t i = 0; i < f.attention.size(); ++i) {
      if (!resolve(sg, f.updates[i], f.attention[i], why)) return false;
      const auto& s = f.attention[i];
      details.push_back(fmt::format("layer={} ({}) scale={:g} (op argument) heads={}/{}x{} mask={}{}{}{}", s.layer,
                                    s.layer_source, s.scale, s.q_heads, s.kv_heads, s.head_dim, s.mask,
                                    s.sliding_window >= 0 ? fmt::format(" window={}", s.sliding_window) : "",
                                    s.chunk_size > 0 ? fmt::format(" chunk={}", s.chunk_size) : "",
                                    s.softcap != 0.0 ? fmt::format(" softcap={:g}", s.softcap) : ""));
    }
    f.detail = fmt::format("{}", fmt::join(details, "; "));
    return true;
  }

 private:
  // The structural part of one op's site: its scale, window, softcap, chunk and mask arguments.
  static std::optional<AttentionSite> site_of(const Subgraph& sg, const ir::Node& n, Why& why) {
    const auto& def = ir::op_def(n.op);
    if (n.args.size() != def.args.size())
      return why.reject("attention op with {} arguments, expected {}", n.args.size(), def.args.size());
    const auto scale = number_arg(n, def.arg("scaling"));
    if (!scale)
      throw FusionError(fmt::format("attention in module {} (node '{}'): the softmax scale is not a number at "
                                    "capture (argument {}); refusing to guess a default",
                                    sg.mod().path, n.name,
                                    n.args[def.arg("scaling")].kind == ir::Arg::Kind::none ? "None" : "symbolic"));
    AttentionSite s;
    s.scale = *scale;
    s.sliding_window = static_cast<int64_t>(number_arg(n, def.arg("sliding_window")).value_or(-1));
    s.softcap = number_arg(n, def.arg("softcap")).value_or(0.0);
    s.chunk_size = static_cast<int64_t>(number_arg(n, def.arg("chunk_size")).value_or(-1));
    const auto& mask = n.args[def.arg("mask")];
    if (mask.kind != ir::Arg::Kind::string)
      throw FusionError(fmt::format("attention in module {} (node '{}'): the mask argument is not a string",
                                    sg.mod().path, n.name));
    s.mask = mask.s;
    return s;
  }

  // One op's instance data: its KV layer (the op's argument, which capture numbers in graph order;
  // an IR whose op has none takes the module's layer_idx attribute) and its head shapes.
  static bool resolve(const Subgraph& sg, ArgUpdate& u, AttentionSite& s, Why& why) {
    const ir::Graph& g = *sg.graph;
    const ir::Node& n = g.nodes[u.node];
    const auto& def = ir::op_def(n.op);
    const auto& la = n.args[def.arg(def.layer)];
    const int64_t arg_layer = la.kind == ir::Arg::Kind::integer ? la.i : -1;
    const auto& attrs = sg.mod().attributes;
    const bool has_attr = attrs.is_object() && attrs.contains("layer_idx") && attrs["layer_idx"].is_number_integer();
    s.layer = arg_layer >= 0 ? arg_layer : has_attr ? attrs["layer_idx"].get<int64_t>() : -1;
    s.layer_source = arg_layer >= 0 ? "call order" : "module attribute";
    if (s.layer < 0)
      throw FusionError(fmt::format("attention in module {} has no layer index (no layer_idx attribute or argument)",
                                    sg.mod().path));
    if (s.mask != "causal" && s.mask != "sliding" && s.mask != "chunked")
      throw FusionError(fmt::format("attention in module {} (layer {}): its mask is '{}', which the engine cannot "
                                    "express (it runs causal, sliding-window and chunked masks)",
                                    sg.mod().path, s.layer, s.mask));
    u.value = integer(s.layer);
    const auto& q = g.nodes[ref_arg(n, def.arg("q"))].out;
    const auto& k = g.nodes[ref_arg(n, def.arg("k"))].out;
    const auto& v = g.nodes[ref_arg(n, def.arg("v"))].out;
    auto hq = static_dim(q, 1), hk = static_dim(k, 1), d = static_dim(q, 3), dv = static_dim(v, 3);
    if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4 || !hq || !hk || !d || !dv)
      return why.reject("q/k/v are not [1, heads, tokens, head_dim] with static heads and head sizes");
    if (*hq % *hk != 0) return why.reject("{} query heads are not a multiple of {} kv heads", *hq, *hk);
    s.q_heads = *hq;
    s.kv_heads = *hk;
    s.head_dim = *d;
    s.v_head_dim = *dv;
    return true;
  }
};

}  // namespace

const Fuser& attention_fuser() {
  static const AttentionFuser f;
  return f;
}

// Registry order 100: additive: attaches the engine's attention site.
[[maybe_unused]] const bool kRegistered = register_fuser(attention_fuser(), 100);

}  // namespace fuselm::fusers
