// attention (additive)   the fuselm.attention op a module dispatches  →  an engine attention site
//   anchor:   the module's own fuselm.attention op (one per module)
//   layer:    the module's own layer_idx attribute, cross-checked with the op's layer_idx argument;
//             a module without one (attribute and argument both absent) is an error; the
//             resolved layer is written into the op (the KV layers are read from the ops)
//   scale:    the op's scaling argument as passed at the call (OPT passes 1.0, Gemma2
//             query_pre_attn_scalar**-0.5); anything but a number is an error, never a default
//   heads:    from the operands' own shapes: q [1, Hq, T, D], k [1, Hkv, T, D], v [1, Hkv, T, Dv]
//   mask:     the op's mask argument, the kind capture read from the layer's mask function
//             (python/fuselm_capture/masks.py): causal, sliding (sliding_window) or chunked
//             (chunk_size); any other kind is an error naming the module and layer, never a
//             silent causal attention
//   Two modules with one layer index, or an index no module serves, are errors naming both
//   (checked over the rewritten graph's KV layers by the driver, kv_layers.cc).
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
    if (ops.size() != 1) return why.reject("{} attention ops in one module; expected one", ops.size());
    const ir::Node& n = g.nodes[ops[0]];
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
    Fusion f;
    f.attention = s;
    // The op stays; validate writes this instance's resolved layer into it (and reads its operands).
    f.updates.push_back(ArgUpdate{ops[0], std::string(def.layer), integer(-1)});
    return f;
  }

  bool validate(const Subgraph& sg, Fusion& f, Why& why) const override {
    const ir::Graph& g = *sg.graph;
    const ir::Node& n = g.nodes[f.updates[0].node];
    const auto& def = ir::op_def(n.op);
    auto& s = *f.attention;
    const auto& la = n.args[def.arg(def.layer)];
    const int64_t arg_layer = la.kind == ir::Arg::Kind::integer ? la.i : -1;
    const auto& attrs = sg.mod().attributes;
    // A negative attribute (a module shared by layers, each call naming its layer) is no index.
    const bool has_attr = attrs.is_object() && attrs.contains("layer_idx") && attrs["layer_idx"].is_number_integer() &&
                          attrs["layer_idx"].get<int64_t>() >= 0;
    const int64_t attr_layer = has_attr ? attrs["layer_idx"].get<int64_t>() : -1;
    if (has_attr && arg_layer >= 0 && attr_layer != arg_layer)
      throw FusionError(fmt::format("attention in module {}: the module's layer_idx is {} but its op was called with {}",
                                    sg.mod().path, attr_layer, arg_layer));
    s.layer = has_attr ? attr_layer : arg_layer;
    s.layer_source = has_attr ? "module attribute" : "op argument";
    if (s.layer < 0)
      throw FusionError(fmt::format("attention in module {} has no layer index (no layer_idx attribute or argument)",
                                    sg.mod().path));
    if (s.mask != "causal" && s.mask != "sliding" && s.mask != "chunked")
      throw FusionError(fmt::format("attention in module {} (layer {}): its mask is '{}', which the engine cannot "
                                    "express (it runs causal, sliding-window and chunked masks)",
                                    sg.mod().path, s.layer, s.mask));
    f.updates[0].value = integer(s.layer);
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
    f.detail = fmt::format("layer={} ({}) scale={:g} (op argument) heads={}/{}x{} mask={}{}{}{}", s.layer,
                           s.layer_source, s.scale, s.q_heads, s.kv_heads, s.head_dim, s.mask,
                           s.sliding_window >= 0 ? fmt::format(" window={}", s.sliding_window) : "",
                           s.chunk_size > 0 ? fmt::format(" chunk={}", s.chunk_size) : "",
                           s.softcap != 0.0 ? fmt::format(" softcap={:g}", s.softcap) : "");
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
