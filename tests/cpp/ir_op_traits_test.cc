// ir/op_traits.h: every op the runtime registers (and every fuselm op of the definition table)
// has declared traits, and the traits the passes rely on are there: the fusers' views and casts,
// the row-wise ops of LM-head row selection, the in-place ops and aliasing views of dead-code
// removal, and the tensor-parallel rule of every op the shard plan follows.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "ir/op_defs.h"
#include "ir/op_traits.h"
#include "runtime/op_registry.h"

namespace fuselm::ir {
namespace ir_op_traits_test {

TEST(OpTraits, EveryRegisteredOpHasTraits) {
  for (const auto& name : runtime::OpRegistry::builtin().names())
    EXPECT_NE(find_op_traits(name), nullptr)
        << name << " is registered by the runtime but has no entry in src/ir/op_traits.cc: declare whether it is a "
        << "view, pointwise, row-wise, a cast, a reduction, and its tensor-parallel rule";
}

TEST(OpTraits, EveryDefinedOpHasTraits) {
  for (const auto& def : op_defs()) EXPECT_NE(find_op_traits(def.name), nullptr) << def.name;
}

TEST(OpTraits, NamesAreUniqueAndUnknownOpsHaveNoTraits) {
  std::set<std::string_view> seen;
  for (const auto& t : op_traits_table()) EXPECT_TRUE(seen.insert(t.name).second) << t.name << " is listed twice";
  EXPECT_EQ(find_op_traits("placeholder"), nullptr);
  const OpTraits& none = op_traits("aten.no_such_op.default");
  EXPECT_FALSE(none.is_view() || none.pointwise || none.rowwise || none.cast || none.in_place || none.row_product);
  EXPECT_EQ(none.tp, TpRule::replicate);
  EXPECT_EQ(none.reduce_axes, -1);
}

// The fusers look through these (pattern.cc, packed_qkv.cc, moe*.cc, mla_roles.cc).
TEST(OpTraits, FusersViewsAndCasts) {
  for (const char* op : {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"})
    EXPECT_EQ(op_traits(op).view, ViewKind::reshape) << op;
  const std::map<std::string, ViewKind> kinds = {
      {"aten.transpose.int", ViewKind::transpose}, {"aten.permute.default", ViewKind::permute},
      {"aten.unsqueeze.default", ViewKind::unsqueeze}, {"aten.squeeze.dim", ViewKind::squeeze},
      {"aten.expand.default", ViewKind::expand},    {"aten.alias.default", ViewKind::alias},
      {"aten.contiguous.default", ViewKind::copy},  {"aten.clone.default", ViewKind::copy},
      {"aten.flatten.using_ints", ViewKind::flatten}, {"aten.slice.Tensor", ViewKind::slice},
      {"aten.select.int", ViewKind::select},        {"aten.split_with_sizes.default", ViewKind::split}};
  for (const auto& [op, kind] : kinds) EXPECT_EQ(op_traits(op).view, kind) << op;
  for (const char* op :
       {"aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten._to_copy.default", "aten.type_as.default"})
    EXPECT_TRUE(op_traits(op).cast) << op;
  EXPECT_FALSE(op_traits("aten.mul.Tensor").cast);
  EXPECT_FALSE(op_traits("aten.linear.default").is_view());
}

// Dead-code removal (fusers/rewrite.cc): an in-place write lands in the base its views alias.
TEST(OpTraits, InPlaceOpsAndAliasingViews) {
  for (const char* op : {"aten.copy_.default", "aten.scatter_.value", "aten.add_.Tensor", "aten.mul_.Tensor",
                         "aten.sub_.Tensor", "aten.div_.Tensor", "aten.clamp_.default"})
    EXPECT_TRUE(op_traits(op).in_place) << op;
  for (const char* op : {"aten.add.Tensor", "aten._to_copy.default", "aten._softmax.default", "aten.copy.default"})
    EXPECT_FALSE(op_traits(op).in_place) << op;
  for (const char* op : {"aten.slice.Tensor", "aten.view.default", "aten.transpose.int", "aten.select.int",
                         "aten.unsqueeze.default", "aten.permute.default", "aten.alias.default", "aten.narrow.default",
                         "aten.squeeze.dim", "aten.expand.default", "aten.as_strided.default"})
    EXPECT_TRUE(op_traits(op).aliases) << op;
  for (const char* op : {"aten.reshape.default", "aten.contiguous.default", "aten.clone.default"})
    EXPECT_FALSE(op_traits(op).aliases) << op;
}

// LM-head row selection (passes/logit_rows.cc) walks through these between the head and the
// output, and takes a row product as the head.
TEST(OpTraits, RowSelection) {
  for (const char* op : {"aten.alias.default", "aten.to.dtype", "aten._to_copy.default", "aten.clone.default",
                         "aten.tanh.default", "aten.mul.Tensor", "aten.div.Tensor", "aten.add.Tensor", "aten.sub.Tensor",
                         "aten.mul.Scalar", "aten.div.Scalar", "aten.contiguous.default", "aten.to.dtype_layout",
                         "aten.type_as.default", "fuselm.rms_norm.default", "fuselm.act_and_mul.default",
                         "fuselm.softcap.default"})
    EXPECT_TRUE(op_traits(op).rowwise) << op;
  for (const char* op : {"aten.softmax.int", "aten.add_.Tensor", "aten.linear.default", "aten.view.default",
                         "aten.cumsum.default", "fuselm.select_rows.default", "aten.mean.dim"})
    EXPECT_FALSE(op_traits(op).rowwise) << op;
  EXPECT_TRUE(op_traits("aten.linear.default").row_product);
  EXPECT_TRUE(op_traits("aten.matmul.default").row_product);
  EXPECT_FALSE(op_traits("aten.bmm.default").row_product);
}

// The engine's quantized weights (engine/quant_weights.cc): where a block-quantized weight may
// be read, and which ops look rows up in a table.
TEST(OpTraits, QuantizedWeightsAndLookups) {
  std::map<std::string, std::pair<int, bool>> want = {{"aten.linear.default", {1, false}},
                                                      {"aten.embedding.default", {0, true}},
                                                      {"fuselm.vocab_embedding.default", {0, true}}};
  for (const auto& t : op_traits_table()) {
    const auto it = want.find(std::string(t.name));
    EXPECT_EQ(t.quant_weight, it == want.end() ? -1 : it->second.first) << t.name;
    EXPECT_EQ(t.lookup, it != want.end() && it->second.second) << t.name;
  }
}

// The shard plan's rule for every op it follows; every other op replicates a split reaching it.
TEST(OpTraits, TensorParallelRules) {
  std::map<std::string, TpRule> want = {
      {"aten.linear.default", TpRule::linear},
      {"aten.addmm.default", TpRule::addmm},
      {"aten.embedding.default", TpRule::embedding},
      {"fuselm.experts.default", TpRule::experts},
      {"fuselm.experts_shared.default", TpRule::experts},
      {"fuselm.mla_attention.default", TpRule::mla_attention},
      {"fuselm.attention.default", TpRule::attention},
      {"aten.view.default", TpRule::reshape},
      {"aten.reshape.default", TpRule::reshape},
      {"aten._unsafe_view.default", TpRule::reshape},
      {"aten.split_with_sizes.default", TpRule::split_with_sizes},
      {"getitem", TpRule::getitem},
      {"aten.cat.default", TpRule::cat},
      {"fuselm.act_and_mul.default", TpRule::act_and_mul},
      {"fuselm.rope.default", TpRule::rope},
      {"fuselm.rms_norm.default", TpRule::rms_norm},
      {"aten.transpose.int", TpRule::transpose},
      {"aten.permute.default", TpRule::permute},
      {"aten.unsqueeze.default", TpRule::unsqueeze},
      {"aten.slice.Tensor", TpRule::slice},
      {"aten.select.int", TpRule::drop_dim},
      {"aten.squeeze.dim", TpRule::drop_dim},
      {"aten.expand.default", TpRule::expand},
      {"aten.mean.dim", TpRule::reduce},
      {"aten.sum.dim_IntList", TpRule::reduce},
      {"aten.amax.default", TpRule::reduce},
      {"aten.sym_size.int", TpRule::sym_size},
  };
  for (const char* op :
       {"aten.mul.Tensor", "aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor", "aten.mul.Scalar", "aten.add.Scalar",
        "aten.sub.Scalar", "aten.div.Scalar", "aten.neg.default", "aten.rsqrt.default", "aten.pow.Tensor_Scalar",
        "aten.silu.default", "aten.gelu.default", "aten.tanh.default", "aten.sigmoid.default", "aten.relu.default",
        "aten.exp.default", "aten.erf.default", "aten.sin.default", "aten.cos.default", "aten.to.dtype",
        "aten._to_copy.default", "aten.to.dtype_layout", "aten.to.device", "aten.contiguous.default",
        "aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.dropout.default",
        "aten.type_as.default", "aten.sqrt.default", "aten.abs.default", "fuselm.softcap.default"})
    want[op] = TpRule::pointwise;
  for (const auto& t : op_traits_table()) {
    const auto it = want.find(std::string(t.name));
    EXPECT_EQ(t.tp, it == want.end() ? TpRule::replicate : it->second) << t.name;
  }
  for (const auto& [op, rule] : want) EXPECT_NE(find_op_traits(op), nullptr) << op;
  for (const char* op : {"aten.mean.dim", "aten.sum.dim_IntList", "aten.amax.default"})
    EXPECT_EQ(op_traits(op).reduce_axes, 1) << op;
}

}  // namespace ir_op_traits_test
}  // namespace fuselm::ir
