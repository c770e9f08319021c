// The stateful ops of a graph as the engine finds them (engine/state_ops.h): state indices 0..n-1
// once each, static sizes (ir::OpDef::state_size), one-line errors naming the module; and the KV
// layers of a hybrid, whose layer indices without attention hold no rows (fusers::kv_layers).
#include <gtest/gtest.h>

#include <string>

#include "engine/state_ops.h"
#include "fusers/plan.h"
#include "ir/load.h"

namespace fuselm::engine {
namespace engine_state_ops_test {

ir::Arg ref(int i) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::ref;
  a.ref = i;
  return a;
}

ir::Arg integer(int64_t v) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::integer;
  a.i = v;
  return a;
}

ir::Arg text(const std::string& s) {
  ir::Arg a;
  a.kind = ir::Arg::Kind::string;
  a.s = s;
  return a;
}

int add_tensor(ir::Graph& g, const std::string& name, std::vector<ir::Dim> shape) {
  ir::Node n;
  n.index = static_cast<int>(g.nodes.size());
  n.name = name;
  n.op = "placeholder";
  n.placeholder_kind = "parameter";
  n.out_kind = ir::Node::Out::tensor;
  n.out.shape = std::move(shape);
  g.nodes.push_back(n);
  return n.index;
}

// fuselm.causal_conv1d over C channels with a K-wide kernel, in module `path`, state `idx`.
void add_conv(ir::Graph& g, const std::string& path, int64_t idx, ir::Dim channels, int64_t k) {
  const int w = add_tensor(g, path + ".weight", {channels, ir::Dim{k, ""}});
  const int x = add_tensor(g, path + ".x", {ir::Dim{1, ""}, channels, ir::Dim{0, "s0"}});
  g.modules.push_back({path, "Conv", nlohmann::json::object()});
  ir::Node n;
  n.index = static_cast<int>(g.nodes.size());
  n.name = path + ".conv";
  n.op = "fuselm.causal_conv1d.default";
  n.args = {ref(x), ref(w), ir::Arg{}, text("silu"), integer(idx)};
  n.out_kind = ir::Node::Out::tensor;
  n.module_stack = {static_cast<int>(g.modules.size()) - 1};
  g.nodes.push_back(n);
}

TEST(StateOps, FoundInStateIndexOrderWithTheirSizes) {
  ir::Graph g;
  add_conv(g, "layers.2.mixer", 1, ir::Dim{16, ""}, 4);
  add_conv(g, "layers.0.mixer", 0, ir::Dim{8, ""}, 4);
  const auto ops = stateful_ops(g);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].module, "layers.0.mixer");
  EXPECT_EQ(ops[0].floats, 8 * 3);  // C x (K - 1)
  EXPECT_EQ(ops[1].module, "layers.2.mixer");
  EXPECT_EQ(ops[1].floats, 16 * 3);
  EXPECT_EQ(state_floats(ops), (std::vector<int64_t>{24, 48}));
}

void expect_error(const ir::Graph& g, const std::string& want) {
  try {
    stateful_ops(g);
    ADD_FAILURE() << "no error, wanted: " << want;
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(StateOps, IndicesUsedTwiceOrMissingAndSymbolicSizesAreRefusedNamingTheModule) {
  ir::Graph twice;
  add_conv(twice, "a", 0, ir::Dim{8, ""}, 4);
  add_conv(twice, "b", 0, ir::Dim{8, ""}, 4);
  expect_error(twice, "state index 0 is used twice: by fuselm.causal_conv1d.default in module a and "
                      "fuselm.causal_conv1d.default in module b");
  ir::Graph gap;
  add_conv(gap, "a", 0, ir::Dim{8, ""}, 4);
  add_conv(gap, "c", 2, ir::Dim{8, ""}, 4);
  expect_error(gap, "no stateful op holds state index 1 (the next, 2, is fuselm.causal_conv1d.default in module c)");
  ir::Graph negative;
  add_conv(negative, "n", -1, ir::Dim{8, ""}, 4);
  expect_error(negative, "fuselm.causal_conv1d.default in module n: its state index is not a non-negative integer");
  ir::Graph symbolic;
  add_conv(symbolic, "s", 0, ir::Dim{0, "s1"}, 4);
  try {
    stateful_ops(symbolic);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("fuselm.causal_conv1d.default in module s: no static state size", 0), 0u)
        << e.what();
  }
}

ir::Graph attention_at_0_and_2() {
  return ir::load(std::string(FUSELM_SOURCE_DIR) + "/tests/cpp/data/fusers/attn_missing.json");
}

TEST(HybridKvLayers, IndicesWithoutAttentionHoldNoRowsInAStatefulGraph) {
  ir::Graph g = attention_at_0_and_2();
  std::vector<std::string> errors;
  fusers::kv_layers(g, errors);
  EXPECT_EQ(errors, std::vector<std::string>{"no attention module serves layer index 1 (the next, 2, is served by attns.1)"});
  add_conv(g, "mixer", 0, ir::Dim{8, ""}, 4);  // layer 1 is recurrent
  errors.clear();
  const auto layers = fusers::kv_layers(g, errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_GT(layers[0].k_width, 0);
  EXPECT_EQ(layers[1].k_width, 0);
  EXPECT_EQ(layers[1].v_width, 0);
  EXPECT_EQ(layers[2].k_width, layers[0].k_width);
}

}  // namespace engine_state_ops_test
}  // namespace fuselm::engine
