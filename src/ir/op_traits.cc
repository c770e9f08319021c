#include "ir/op_traits.h"

#include "ir/op_defs.h"

#include <string_view>
#include <unordered_map>
#include <vector>

namespace fuselm::ir {
namespace {

using V = ViewKind;
using T = TpRule;

// Builders for the table's rows, one per family of ops.

// Elementwise arithmetic, activations, comparisons: pointwise and (out of place) row-wise.
constexpr OpTraits elementwise(std::string_view name, TpRule tp = T::replicate) {
  OpTraits t{name};
  t.pointwise = t.rowwise = true;
  t.tp = tp;
  return t;
}
// An elementwise op writing into argument 0 (never row-wise: selecting rows first would skip
// the write to the others).
constexpr OpTraits elementwise_in_place(std::string_view name) {
  OpTraits t{name};
  t.pointwise = t.in_place = true;
  return t;
}
constexpr OpTraits cast(std::string_view name, TpRule tp) {
  OpTraits t = elementwise(name, tp);
  t.cast = true;
  return t;
}
constexpr OpTraits view(std::string_view name, ViewKind kind, bool aliases, TpRule tp) {
  OpTraits t{name};
  t.view = kind;
  t.aliases = aliases;
  t.tp = tp;
  // An identity or a copy is elementwise and row-wise too (the plan passes a split through it).
  if (kind == V::alias || kind == V::copy) t.pointwise = t.rowwise = true;
  return t;
}
constexpr OpTraits reduction(std::string_view name, int8_t axes, TpRule tp) {
  OpTraits t{name};
  t.reduce_axes = axes;
  t.tp = tp;
  return t;
}
constexpr OpTraits in_place(std::string_view name) {
  OpTraits t{name};
  t.in_place = true;
  return t;
}
constexpr OpTraits product(std::string_view name, TpRule tp) {
  OpTraits t{name};
  t.row_product = true;
  t.tp = tp;
  return t;
}
constexpr OpTraits rule(std::string_view name, TpRule tp) {
  OpTraits t{name};
  t.tp = tp;
  return t;
}
// An op that may read a block-quantized weight in argument `arg` (a lookup: a table's rows).
constexpr OpTraits quantizable(OpTraits t, int8_t arg, bool lookup) {
  t.quant_weight = arg;
  t.lookup = lookup;
  return t;
}
// Creation ops, scalar ops of symbolic shapes and everything else nothing is declared about.
constexpr OpTraits plain(std::string_view name) { return OpTraits{name}; }

// The tensor-parallel rules are those the shard plan has been proven on: an op that is
// pointwise by its semantics but not listed with T::pointwise (aten.log, aten.where, ...) still
// replicates a split that reaches it.

// Views (docs/ir.md): the values of argument 0, laid out differently; casts.
std::vector<OpTraits> views_and_casts() {
  return {
      view("aten.view.default", V::reshape, true, T::reshape),
      view("aten.reshape.default", V::reshape, false, T::reshape),
      view("aten._unsafe_view.default", V::reshape, true, T::reshape),
      view("aten.flatten.using_ints", V::flatten, false, T::replicate),
      view("aten.transpose.int", V::transpose, true, T::transpose),
      view("aten.t.default", V::transpose, true, T::replicate),
      view("aten.permute.default", V::permute, true, T::permute),
      view("aten.unsqueeze.default", V::unsqueeze, true, T::unsqueeze),
      view("aten.squeeze.dim", V::squeeze, true, T::drop_dim),
      view("aten.squeeze.dims", V::squeeze, true, T::replicate),
      view("aten.squeeze.default", V::squeeze, true, T::replicate),
      view("aten.slice.Tensor", V::slice, true, T::slice),
      view("aten.narrow.default", V::slice, true, T::replicate),  // not registered: capture decomposes it
      view("aten.select.int", V::select, true, T::drop_dim),
      view("aten.expand.default", V::expand, true, T::expand),
      view("aten.split.Tensor", V::split, true, T::replicate),
      view("aten.split_with_sizes.default", V::split, true, T::split_with_sizes),
      view("aten.chunk.default", V::split, true, T::replicate),
      view("aten.unbind.int", V::split, true, T::replicate),
      view("aten.view_as_complex.default", V::complex, true, T::replicate),
      view("aten.view_as_real.default", V::complex, true, T::replicate),
      view("aten.as_strided.default", V::strided, true, T::replicate),  // not registered
      view("aten.alias.default", V::alias, true, T::pointwise),
      view("aten.detach.default", V::alias, true, T::pointwise),
      view("aten.dropout.default", V::alias, false, T::pointwise),  // identity at inference
      view("aten.contiguous.default", V::copy, false, T::pointwise),
      view("aten.clone.default", V::copy, false, T::pointwise),
      view("aten.lift_fresh_copy.default", V::copy, false, T::replicate),
      // Casts: the values of argument 0 in the node's dtype.
      cast("aten.to.dtype", T::pointwise),
      cast("aten.to.dtype_layout", T::pointwise),
      cast("aten.to.device", T::pointwise),
      cast("aten._to_copy.default", T::pointwise),
      cast("aten.type_as.default", T::pointwise),
      cast("aten.to.other", T::replicate),
  };
}

// Elementwise arithmetic, activations, comparisons; the in-place ones.
std::vector<OpTraits> elementwise_ops() {
  return {
      elementwise("aten.add.Tensor", T::pointwise),
      elementwise("aten.add.Scalar", T::pointwise),
      elementwise("aten.sub.Tensor", T::pointwise),
      elementwise("aten.sub.Scalar", T::pointwise),
      elementwise("aten.rsub.Scalar"),
      elementwise("aten.mul.Tensor", T::pointwise),
      elementwise("aten.mul.Scalar", T::pointwise),
      elementwise("aten.div.Tensor", T::pointwise),
      elementwise("aten.div.Scalar", T::pointwise),
      elementwise("aten.div.Tensor_mode"),
      elementwise("aten.neg.default", T::pointwise),
      elementwise("aten.abs.default", T::pointwise),
      elementwise("aten.sqrt.default", T::pointwise),
      elementwise("aten.rsqrt.default", T::pointwise),
      elementwise("aten.reciprocal.default"),
      elementwise("aten.square.default"),
      elementwise("aten.pow.Tensor_Scalar", T::pointwise),
      elementwise("aten.pow.Tensor_Tensor"),
      elementwise("aten.pow.Scalar"),
      elementwise("aten.exp.default", T::pointwise),
      elementwise("aten.expm1.default"),
      elementwise("aten.log.default"),
      elementwise("aten.erf.default", T::pointwise),
      elementwise("aten.erfinv.default"),
      elementwise("aten.sin.default", T::pointwise),
      elementwise("aten.cos.default", T::pointwise),
      elementwise("aten.tanh.default", T::pointwise),
      elementwise("aten.sigmoid.default", T::pointwise),
      elementwise("aten.silu.default", T::pointwise),
      elementwise("aten.gelu.default", T::pointwise),
      elementwise("aten.relu.default", T::pointwise),
      elementwise("aten.softplus.default"),
      elementwise("aten.floor.default"),
      elementwise("aten.clamp.default"),
      elementwise("aten.clamp.Tensor"),
      elementwise("aten.maximum.default"),
      elementwise("aten.minimum.default"),
      elementwise("aten.max.other"),
      elementwise("aten.min.other"),
      elementwise("aten.polar.default"),
      elementwise("aten.masked_fill.Scalar"),
      elementwise("aten.where.self"),
      elementwise("aten.eq.Scalar"),
      elementwise("aten.eq.Tensor"),
      elementwise("aten.ne.Scalar"),
      elementwise("aten.ne.Tensor"),
      elementwise("aten.gt.Scalar"),
      elementwise("aten.gt.Tensor"),
      elementwise("aten.ge.Scalar"),
      elementwise("aten.ge.Tensor"),
      elementwise("aten.lt.Scalar"),
      elementwise("aten.lt.Tensor"),
      elementwise("aten.le.Scalar"),
      elementwise("aten.le.Tensor"),
      elementwise("aten.bitwise_and.Tensor"),
      elementwise("aten.bitwise_or.Tensor"),
      elementwise("aten.bitwise_not.default"),
      elementwise("aten.logical_and.default"),
      elementwise("aten.logical_not.default"),
      // In place: the result is written into argument 0.
      elementwise_in_place("aten.add_.Tensor"),
      elementwise_in_place("aten.sub_.Tensor"),
      elementwise_in_place("aten.mul_.Tensor"),
      elementwise_in_place("aten.div_.Tensor"),
      elementwise_in_place("aten.clamp_.default"),
      in_place("aten.copy_.default"),
      in_place("aten.scatter_.value"),
  };
}

// Reductions, products, indexing, creation and the rest of ATen.
std::vector<OpTraits> other_aten_ops() {
  return {
      // Reductions (argument 1 lists the dims).
      reduction("aten.mean.dim", 1, T::reduce),
      reduction("aten.sum.dim_IntList", 1, T::reduce),
      reduction("aten.amax.default", 1, T::reduce),
      reduction("aten.max.dim", 1, T::replicate),  // a (values, indices) tuple
      // Products.
      quantizable(product("aten.linear.default", T::linear), 1, false),
      product("aten.matmul.default", T::replicate),
      rule("aten.addmm.default", T::addmm),
      plain("aten.mm.default"),
      plain("aten.bmm.default"),
      plain("aten.baddbmm.default"),
      // Indexing, joining, normalizing, the rest of ATen.
      quantizable(rule("aten.embedding.default", T::embedding), 0, true),
      rule("aten.cat.default", T::cat),
      plain("aten.concat.default"),
      plain("aten.stack.default"),
      plain("aten.gather.default"),
      plain("aten.index_select.default"),
      plain("aten.scatter.value"),
      plain("aten.repeat_interleave.self_int"),
      plain("aten.cumsum.default"),
      plain("aten.topk.default"),
      plain("aten.softmax.int"),
      plain("aten._softmax.default"),
      plain("aten.layer_norm.default"),
      rule("aten.sym_size.int", T::sym_size),
      plain("aten.sym_numel.default"),
      // Creation.
      plain("aten.arange.default"),
      plain("aten.arange.start"),
      plain("aten.arange.start_step"),
      plain("aten.full.default"),
      plain("aten.full_like.default"),
      plain("aten.zeros.default"),
      plain("aten.zeros_like.default"),
      plain("aten.ones.default"),
      plain("aten.ones_like.default"),
      plain("aten.new_empty.default"),
      plain("aten.new_zeros.default"),
      plain("aten.new_ones.default"),
  };
}

// getitem and the scalar ops of symbolic shapes.
std::vector<OpTraits> tuple_and_scalar_ops() {
  return {
      rule("getitem", T::getitem),
      plain("operator.add"),
      plain("operator.sub"),
      plain("operator.mul"),
      plain("operator.neg"),
      plain("operator.truediv"),
      plain("operator.floordiv"),
      plain("operator.mod"),
      plain("math.ceil"),
      plain("math.floor"),
      plain("math.trunc"),
      plain("torch.sym_float"),
      plain("torch.sym_int"),
      plain("torch.sym_max"),
      plain("torch.sym_min"),
  };
}

const std::vector<OpTraits>& table() {
  static const std::vector<OpTraits> kTable = [] {
    std::vector<OpTraits> all;
    for (auto part : {views_and_casts(), elementwise_ops(), other_aten_ops(), tuple_and_scalar_ops()})
      all.insert(all.end(), part.begin(), part.end());
    // The fuselm ops declare theirs beside their schemas (op_defs.cc).
    for (const auto& def : op_defs()) {
      all.push_back(def.traits);
      all.back().name = def.name;
    }
    return all;
  }();
  return kTable;
}

}  // namespace

std::span<const OpTraits> op_traits_table() { return table(); }

const OpTraits* find_op_traits(std::string_view name) {
  static const auto kByName = [] {
    std::unordered_map<std::string_view, const OpTraits*> m;
    for (const auto& t : table()) m.emplace(t.name, &t);
    return m;
  }();
  const auto it = kByName.find(name);
  return it == kByName.end() ? nullptr : it->second;
}

const OpTraits& op_traits(std::string_view name) {
  static const OpTraits kNone{};
  const OpTraits* t = find_op_traits(name);
  return t ? *t : kNone;
}

}  // namespace fuselm::ir
