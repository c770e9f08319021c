#include "engine/quant_weights.h"

#include <map>

#include "ir/op_traits.h"

namespace fuselm::engine {
namespace {

// Whether argument `i` of node n is where a block-quantized weight may be read (the op's
// quant_weight trait: linear's W, an embedding's table).
bool reads_blocks(const ir::Node& n, size_t i) {
  const int8_t w = ir::op_traits(n.op).quant_weight;
  return w >= 0 && static_cast<size_t>(w) == i;
}

void refs_of(const ir::Arg& a, std::vector<int>& out) {
  if (a.kind == ir::Arg::Kind::ref) out.push_back(a.ref);
  for (const auto& x : a.list) refs_of(x, out);
}

}  // namespace

std::set<std::string, std::less<>> quantizable_parameters(const ir::Graph& g,
                                                          const std::vector<fusers::WeightTransform>& fused) {
  std::map<int, bool> ok;  // parameter placeholder node -> every use reads blocks
  for (const auto& n : g.nodes)
    if (n.op == "placeholder" && n.placeholder_kind == "parameter") ok[n.index] = true;
  for (const auto& n : g.nodes)
    for (size_t i = 0; i < n.args.size(); ++i) {
      std::vector<int> refs;
      refs_of(n.args[i], refs);
      for (int r : refs)
        if (auto it = ok.find(r); it != ok.end() && (n.args[i].kind != ir::Arg::Kind::ref || !reads_blocks(n, i)))
          it->second = false;
    }
  std::map<std::string, bool> by_target;  // absent: not read by the graph
  for (const auto& [idx, good] : ok) by_target[g.nodes[static_cast<size_t>(idx)].target] = good;
  for (const auto& w : fused) {
    auto it = by_target.find(w.target);
    const bool good = it != by_target.end() && it->second;
    for (const auto& s : w.source_targets) {
      auto [si, fresh] = by_target.emplace(s, good);
      if (!fresh) si->second = si->second && good;
    }
  }
  // Tied weights: one tensor, held one way.
  std::map<std::string, bool> by_key;
  auto key_of = [&](const std::string& target) -> std::string {
    const auto p = g.parameters.find(target);
    if (p == g.parameters.end()) return target;
    const auto& keys = (*p)["checkpoint"].value("keys", nlohmann::json::array());
    return keys.size() == 1 && keys[0].is_string() ? keys[0].get<std::string>() : target;
  };
  for (const auto& [t, good] : by_target) {
    auto [it, fresh] = by_key.emplace(key_of(t), good);
    if (!fresh) it->second = it->second && good;
  }
  std::set<std::string, std::less<>> out;
  for (const auto& [t, good] : by_target)
    if (good && by_key[key_of(t)]) out.insert(t);
  return out;
}

std::set<std::string, std::less<>> embedding_tables(const ir::Graph& g) {
  std::set<std::string, std::less<>> out;
  for (const auto& n : g.nodes) {
    const auto& t = ir::op_traits(n.op);  // a lookup reads its table's rows (argument quant_weight)
    const auto w = static_cast<size_t>(t.quant_weight);
    if (t.lookup && n.args.size() > w && n.args[w].kind == ir::Arg::Kind::ref)
      out.insert(g.nodes[static_cast<size_t>(n.args[w].ref)].target);
  }
  return out;
}

const kernels::QuantWeight* QuantWeights::adopt(const weights::WeightView& v) {
  auto& slot = views_[v.data];
  if (slot) return slot.get();
  slot = std::make_unique<kernels::QuantWeight>();
  slot->type = *v.quant;
  slot->blocks = v.data;
  slot->n = v.shape.at(0);
  slot->k = v.shape.at(1);
  slot->row_bytes = kernels::quant_row_bytes(slot->type, slot->k);
  if (kernels::QuantPacked::packable(slot->type)) {
    packed_.push_back(std::make_unique<kernels::QuantPacked>(
        kernels::QuantPacked::pack(slot->type, v.data, slot->row_bytes, slot->n, slot->k)));
    slot->packed = packed_.back().get();
  }
  return slot.get();
}

int64_t QuantWeights::packed_bytes() const {
  int64_t n = 0;
  for (const auto& p : packed_) n += p->bytes();
  return n;
}

}  // namespace fuselm::engine
