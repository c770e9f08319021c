// select_sampled_rows: the LM head is found by structure (a product into the vocabulary behind
// the output through row-wise ops), fuselm.select_rows is put on its input, and the executor
// then gives the logits of the selected rows equal to those rows of the full logits. Graphs it
// cannot prove are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "fusers/pattern.h"
#include "ir/op_traits.h"
#include "passes/logit_rows.h"
#include "runtime/executor.h"

namespace fuselm::passes {
namespace passes_logit_rows_test {

constexpr int64_t kVocab = 11, kHidden = 5, kTable = 7;

using fusers::real;  // the fusers' own literal builders (fusers/pattern.h)
using fusers::ref;

ir::TensorMeta meta(std::vector<ir::Dim> shape) { return ir::TensorMeta{ir::DType::f32, std::move(shape)}; }

int add(ir::Graph& g, std::string name, std::string op, std::vector<ir::Arg> args, ir::TensorMeta out,
        std::string kind = {}, std::string target = {}) {
  ir::Node n;
  n.index = static_cast<int>(g.nodes.size());
  n.name = std::move(name);
  n.op = std::move(op);
  n.args = std::move(args);
  n.out_kind = ir::Node::Out::tensor;
  n.out = std::move(out);
  n.placeholder_kind = std::move(kind);
  n.target = std::move(target);
  g.index_by_name[n.name] = n.index;
  g.nodes.push_back(std::move(n));
  return g.nodes.back().index;
}

// ids [1, s0] -> embedding [1, s0, H] -> tanh -> linear(W [V, H]) [1, s0, V] -> then `tail` on it.
ir::Graph toy(const std::string& tail_op) {
  ir::Graph g;
  const ir::Dim s0{0, "s0"}, one{1, ""}, h{kHidden, ""}, v{kVocab, ""};
  ir::TensorMeta ids = meta({one, s0});
  ids.dtype = ir::DType::i64;
  const int in = add(g, "input_ids", "placeholder", {}, ids, "input", "input_ids");
  const int emb_w = add(g, "p_emb", "placeholder", {}, meta({ir::Dim{kTable, ""}, h}), "parameter", "emb");
  const int head_w = add(g, "p_head", "placeholder", {}, meta({v, h}), "parameter", "head");
  const int emb = add(g, "embedding", "aten.embedding.default", {ref(emb_w), ref(in)}, meta({one, s0, h}));
  const int act = add(g, "tanh", "aten.tanh.default", {ref(emb)}, meta({one, s0, h}));
  int out = add(g, "linear", "aten.linear.default", {ref(act), ref(head_w), ir::Arg{}}, meta({one, s0, v}));
  if (tail_op == "div") out = add(g, "div", "aten.div.Tensor", {ref(out), real(3.0)}, meta({one, s0, v}));
  if (tail_op == "softmax")
    out = add(g, "softmax", "aten._softmax.default", {ref(out), ir::Arg{ir::Arg::Kind::integer, false, -1}},
              meta({one, s0, v}));
  else if (!tail_op.empty() && tail_op != "div")  // any op: the tensor, then a literal
    out = add(g, "tail", tail_op, {ref(out), real(2.0)}, meta({one, s0, v}));
  g.outputs = {out};
  return g;
}

TEST(LogitRows, InsertsTheSelectionBeforeTheHeadAndKeepsRefs) {
  ir::Graph g = toy("div");
  std::string why;
  ASSERT_TRUE(select_sampled_rows(g, kVocab, why)) << why;
  const auto& sel = g.node("fuselm_select_rows");
  const auto& lin = g.node("linear");
  EXPECT_EQ(sel.op, "fuselm.select_rows.default");
  EXPECT_EQ(sel.args[0].ref, g.index_by_name.at("tanh"));
  EXPECT_EQ(lin.args[0].ref, sel.index);
  EXPECT_EQ(lin.args[1].ref, g.index_by_name.at("p_head"));
  EXPECT_EQ(g.node("div").args[0].ref, lin.index);
  EXPECT_EQ(g.outputs.front(), g.index_by_name.at("div"));
  for (size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(g.nodes[i].index, static_cast<int>(i));
  const size_t n = g.nodes.size();
  EXPECT_TRUE(select_sampled_rows(g, kVocab, why));  // idempotent
  EXPECT_EQ(g.nodes.size(), n);
}

TEST(LogitRows, LeavesGraphsItCannotProveAlone) {
  std::string why;
  ir::Graph soft = toy("softmax");  // not known to be row-wise by this pass
  EXPECT_FALSE(select_sampled_rows(soft, kVocab, why));
  EXPECT_NE(why.find("softmax"), std::string::npos) << why;
  ir::Graph wrong_vocab = toy("");
  EXPECT_FALSE(select_sampled_rows(wrong_vocab, kVocab + 1, why));
  ir::Graph div_shared = toy("div");  // the head's output is also a second output: all rows are read
  div_shared.outputs.push_back(div_shared.index_by_name.at("linear"));
  EXPECT_FALSE(select_sampled_rows(div_shared, kVocab, why));
  EXPECT_EQ(div_shared.index_by_name.count("fuselm_select_rows"), 0u);
  ir::Graph head_shared = toy("");  // the head is the output and a second output too
  head_shared.outputs.push_back(head_shared.index_by_name.at("linear"));
  EXPECT_FALSE(select_sampled_rows(head_shared, kVocab, why));
  EXPECT_NE(why.find("also read"), std::string::npos) << why;
}

// The pass walks through exactly the ops the row-wise trait names (ir/op_traits.h), with no list
// of its own: every row-wise op of the table, and none of a sample of ops that are not.
TEST(LogitRows, FollowsTheRowWiseTrait) {
  std::string why;
  int rowwise = 0;
  for (const auto& t : ir::op_traits_table()) {
    if (!t.rowwise) continue;
    ++rowwise;
    ir::Graph g = toy(std::string(t.name));
    EXPECT_TRUE(select_sampled_rows(g, kVocab, why)) << t.name << ": " << why;
  }
  EXPECT_GE(rowwise, 14);
  for (const char* op : {"aten.cumsum.default", "aten.softmax.int", "aten.add_.Tensor", "aten.layer_norm.default",
                         "aten.view.default", "aten.no_such_op.default"}) {
    ir::Graph g = toy(op);
    EXPECT_FALSE(select_sampled_rows(g, kVocab, why)) << op;
    EXPECT_NE(why.find("not known to act row by row"), std::string::npos) << op << ": " << why;
  }
}

// The head is a row product (linear or matmul); a vocab-parallel head's all-gather widens its
// local logits to the vocabulary.
TEST(LogitRows, FindsMatmulAndVocabParallelHeads) {
  std::string why;
  ir::Graph mm = toy("");
  mm.nodes[mm.index_by_name.at("linear")].op = "aten.matmul.default";
  EXPECT_TRUE(select_sampled_rows(mm, kVocab, why)) << why;
  ir::Graph bmm = toy("");
  bmm.nodes[bmm.index_by_name.at("linear")].op = "aten.bmm.default";
  EXPECT_FALSE(select_sampled_rows(bmm, kVocab, why));
  ir::Graph gathered = toy("");
  const int lin = gathered.index_by_name.at("linear");
  ir::TensorMeta full = gathered.nodes[lin].out;
  gathered.nodes[lin].out.shape[2].value = kVocab - 3;  // this rank's columns
  gathered.outputs = {add(gathered, "gather", "fuselm.all_gather.default", {ref(lin)}, full)};
  EXPECT_TRUE(select_sampled_rows(gathered, kVocab, why)) << why;
}

TEST(LogitRows, SelectedRowsEqualThoseRowsOfTheFullLogits) {
  std::vector<float> emb(kTable * kHidden), head(kVocab * kHidden);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = std::sin(0.7f * static_cast<float>(i) + 0.1f);
  for (size_t i = 0; i < head.size(); ++i) head[i] = std::cos(0.3f * static_cast<float>(i));
  const int64_t emb_shape[2] = {kTable, kHidden}, head_shape[2] = {kVocab, kHidden};
  std::map<std::string, runtime::Tensor> params{
      {"emb", runtime::Tensor::contiguous_view(emb.data(), runtime::DType::f32, emb_shape)},
      {"head", runtime::Tensor::contiguous_view(head.data(), runtime::DType::f32, head_shape)}};
  ir::Graph plain = toy("div"), selecting = toy("div");
  std::string why;
  ASSERT_TRUE(select_sampled_rows(selecting, kVocab, why)) << why;
  runtime::Executor full(plain, params, {}), sel(selecting, params, {});
  std::vector<int64_t> ids = {3, 1, 4, 1, 5, 6};
  const int64_t ids_shape[2] = {1, static_cast<int64_t>(ids.size())};
  runtime::Tensor in = runtime::Tensor::contiguous_view(ids.data(), runtime::DType::i64, ids_shape);
  const runtime::Tensor& all = full.run({&in, 1}, runtime::Batch{});
  ASSERT_EQ(all.shape[1], 6);
  const std::vector<int64_t> rows = {5, 2, 0};
  runtime::Batch b;
  b.select_rows = true;
  b.logit_rows = rows;
  const runtime::Tensor& got = sel.run({&in, 1}, b);
  ASSERT_EQ(got.ndim, 3);
  ASSERT_EQ(got.shape[1], 3);
  ASSERT_EQ(got.shape[2], kVocab);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t v = 0; v < kVocab; ++v)
      EXPECT_FLOAT_EQ(got.ptr<float>()[r * kVocab + v], all.ptr<float>()[rows[r] * kVocab + v]) << r << "," << v;
  const runtime::Tensor& again = sel.run({&in, 1}, runtime::Batch{});  // no selection: every row
  ASSERT_EQ(again.shape[1], 6);
  for (int64_t i = 0; i < 6 * kVocab; ++i) EXPECT_FLOAT_EQ(again.ptr<float>()[i], all.ptr<float>()[i]);
}

}  // namespace passes_logit_rows_test
}  // namespace fuselm::passes
