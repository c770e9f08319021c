// load_parameters with a checkpoint "stack": per-expert tensors assembled into one [E, ...]
// parameter (transformers' MergeModulelist(dim=0) [+ Concatenate(dim=d)]), checked element by
// element against the layout transformers' conversion produces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weights/error.h"
#include "weights/load_parameters.h"
#include "weights_test_util.h"

namespace fuselm::weights {
namespace weights_stack_test {

using namespace test_util;
namespace fs = std::filesystem;
using kernels::DType;

float value(const WeightView& v, int64_t i) { return kernels::load_as_f32(v.data, v.dtype, i); }

// part p of expert e, element (r, c) = 1000e + 100p + 10r + c (exact in bf16 for small values)
float elem(int e, int p, int r, int c) { return static_cast<float>(1000 * e + 100 * p + 10 * r + c); }

std::vector<StTensor> experts_parts(int experts, int parts, int rows, int cols, bool bf16) {
  const char* names[] = {"gate_proj", "up_proj"};
  std::vector<StTensor> out;
  for (int e = 0; e < experts; ++e)
    for (int p = 0; p < parts; ++p) {
      std::vector<float> v;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) v.push_back(bf16 ? static_cast<float>(10 * p + r + c) : elem(e, p, r, c));
      const std::string key = "experts." + std::to_string(e) + "." + names[p] + ".weight";
      out.push_back(bf16 ? bf16_tensor(key, {rows, cols}, v) : f32_tensor(key, {rows, cols}, v));
    }
  return out;
}

nlohmann::json stacked(std::vector<int64_t> shape, int experts, int parts, nlohmann::json concat_dim) {
  const char* names[] = {"gate_proj", "up_proj"};
  nlohmann::json keys = nlohmann::json::array();
  for (int e = 0; e < experts; ++e)
    for (int p = 0; p < parts; ++p) keys.push_back("experts." + std::to_string(e) + "." + names[p] + ".weight");
  return {{"shape", shape},
          {"dtype", "f32"},
          {"checkpoint",
           {{"keys", keys},
            {"converter", "mlp.experts.*.up_proj.weight"},
            {"stack", {{"experts", experts}, {"parts", parts}, {"concat_dim", concat_dim}}}}}};
}

struct Fixture {
  TempDir dir;
  explicit Fixture(const std::vector<StTensor>& t) { write_safetensors(dir / "model.safetensors", t); }
  Checkpoint open() const { return Checkpoint::open(dir.path()); }
};

TEST(WeightsStack, GateAndUpConcatenatedAlongRowsPerExpert) {
  // 12 experts, so text order (experts.10 < experts.2) differs from expert order.
  Fixture fx(experts_parts(12, 2, 3, 4, false));
  Checkpoint c = fx.open();
  nlohmann::json params = {{"gate_up", stacked({12, 6, 4}, 12, 2, 1)}};
  LoadedParameters p = load_parameters(params, c);
  const WeightView& w = p.at("gate_up");
  EXPECT_TRUE(w.owned);
  EXPECT_EQ(w.dtype, DType::f32);
  int bad = 0;
  for (int e = 0; e < 12; ++e)
    for (int r = 0; r < 6; ++r)
      for (int col = 0; col < 4; ++col)
        bad += value(w, (e * 6 + r) * 4 + col) != elem(e, r / 3, r % 3, col);
  EXPECT_EQ(bad, 0);
}

TEST(WeightsStack, ConcatenatedAlongColumns) {
  Fixture fx(experts_parts(3, 2, 2, 3, false));
  Checkpoint c = fx.open();
  LoadedParameters p = load_parameters({{"w", stacked({3, 2, 6}, 3, 2, 2)}}, c);
  const WeightView& w = p.at("w");
  int bad = 0;
  for (int e = 0; e < 3; ++e)
    for (int r = 0; r < 2; ++r)
      for (int col = 0; col < 6; ++col) bad += value(w, (e * 2 + r) * 6 + col) != elem(e, col / 3, r, col % 3);
  EXPECT_EQ(bad, 0);
}

TEST(WeightsStack, MergeOnlyAndDtypeConversion) {
  Fixture fx(experts_parts(4, 1, 2, 2, true));
  Checkpoint c = fx.open();
  LoadedParameters keep = load_parameters({{"down", stacked({4, 2, 2}, 4, 1, nullptr)}}, c);
  EXPECT_EQ(keep.at("down").dtype, DType::bf16);
  LoadOptions f32;
  f32.dtype = DTypePolicy::f32;
  LoadedParameters wide = load_parameters({{"down", stacked({4, 2, 2}, 4, 1, nullptr)}}, c, f32);
  EXPECT_EQ(wide.at("down").dtype, DType::f32);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(value(wide.at("down"), e * 4 + 3), 2.f);  // r = 1, c = 1
}

TEST(WeightsStack, PlainConcatenationHasNoExpertAxis) {
  // transformers' Concatenate(dim=d) alone ("experts": 0): the two parts of "expert" 0 laid side by
  // side along dim d of the parameter itself, e.g. q/k/v convolution weights merged into one.
  Fixture fx(experts_parts(1, 2, 3, 4, false));
  Checkpoint c = fx.open();
  auto plain = [](std::vector<int64_t> shape, int d) {
    nlohmann::json j = stacked(shape, 0, 2, d);
    j["checkpoint"]["keys"] = {"experts.0.gate_proj.weight", "experts.0.up_proj.weight"};
    return j;
  };
  LoadedParameters rows = load_parameters({{"w", plain({6, 4}, 0)}}, c);
  LoadedParameters cols = load_parameters({{"w", plain({3, 8}, 1)}}, c);
  EXPECT_EQ(rows.at("w").shape, (std::vector<int64_t>{6, 4}));
  int bad = 0;
  for (int r = 0; r < 6; ++r)
    for (int col = 0; col < 4; ++col) bad += value(rows.at("w"), r * 4 + col) != elem(0, r / 3, r % 3, col);
  for (int r = 0; r < 3; ++r)
    for (int col = 0; col < 8; ++col) bad += value(cols.at("w"), r * 8 + col) != elem(0, col / 4, r, col % 4);
  EXPECT_EQ(bad, 0);
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", plain({6, 4}, 2)}}, c); }), "does not fit 2 keys and shape [6, 4]");
}

TEST(WeightsStack, PlainConcatenationOfUnequalParts) {
  // q and k of width 1, v of width 2 (rows of [C, 1, K] convolution weights), concatenated along dim 0.
  std::vector<float> q{1, 2}, k{3, 4}, v{5, 6, 7, 8};
  Fixture fx({f32_tensor("q", {1, 1, 2}, q), f32_tensor("k", {1, 1, 2}, k), f32_tensor("v", {2, 1, 2}, v)});
  Checkpoint c = fx.open();
  nlohmann::json j = stacked({4, 1, 2}, 0, 3, 0);
  j["checkpoint"]["keys"] = {"q", "k", "v"};
  LoadedParameters p = load_parameters({{"w", j}}, c);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(value(p.at("w"), i), static_cast<float>(i + 1));
  j["shape"] = {5, 1, 2};
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", j}}, c); }), "add up to 4 along dim 0");
}

TEST(WeightsStack, ErrorsNameTheTensor) {
  Fixture fx(experts_parts(2, 2, 3, 4, false));
  Checkpoint c = fx.open();
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", stacked({3, 6, 4}, 3, 2, 1)}}, c); }),
                  "parameter 'w' needs checkpoint key 'experts.2.gate_proj.weight', which the checkpoint does not have");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", stacked({2, 8, 4}, 2, 2, 1)}}, c); }),
                  "tensor 'experts.0.gate_proj.weight' in ");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", stacked({2, 8, 4}, 2, 2, 1)}}, c); }),
                  "has shape [3, 4] but parameter 'w' stacks parts of shape [4, 4]");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", stacked({2, 6, 4}, 2, 2, nullptr)}}, c); }),
                  "IR parameter 'w': has checkpoint stack");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"w", stacked({2, 6, 4}, 3, 2, 1)}}, c); }),
                  "does not fit 6 keys and shape [2, 6, 4]");
}

// transformers' Chunk(dim=d): one checkpoint tensor holding several parameters (hrm_text's packed
// gate/q/k/v), each reading its equal part ("chunk": index of count along dim), in the target dtype.
nlohmann::json chunk_of(std::vector<int64_t> shape, int index, int count, int dim, const char* dtype = "f32") {
  return {{"shape", shape},
          {"dtype", dtype},
          {"checkpoint", {{"keys", {"packed"}}, {"chunk", {{"index", index}, {"count", count}, {"dim", dim}}}}}};
}

TEST(WeightsStack, ChunksOfOnePackedTensor) {
  std::vector<float> packed;  // [6, 4]: element (r, c) = 10r + c
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) packed.push_back(static_cast<float>(10 * r + c));
  Fixture fx({bf16_tensor("packed", {6, 4}, packed)});
  Checkpoint c = fx.open();
  LoadedParameters p = load_parameters({{"a", chunk_of({2, 4}, 0, 3, 0)}, {"b", chunk_of({2, 4}, 1, 3, 0)},
                                        {"c", chunk_of({2, 4}, 2, 3, 0)}, {"left", chunk_of({6, 2}, 0, 2, 1)},
                                        {"right", chunk_of({6, 2}, 1, 2, 1)}},
                                       c, LoadOptions{.dtype = DTypePolicy::f32});
  int bad = 0;
  const char* rows[] = {"a", "b", "c"};
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 8; ++i) bad += value(p.at(rows[k]), i) != packed[static_cast<size_t>(8 * k + i)];
  for (int r = 0; r < 6; ++r)
    for (int col = 0; col < 2; ++col) {
      bad += value(p.at("left"), r * 2 + col) != packed[static_cast<size_t>(r * 4 + col)];
      bad += value(p.at("right"), r * 2 + col) != packed[static_cast<size_t>(r * 4 + 2 + col)];
    }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(p.at("b").dtype, DType::f32);
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"a", chunk_of({3, 4}, 0, 3, 0)}}, c); }),
                  "tensor 'packed' in ");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"a", chunk_of({3, 4}, 0, 3, 0)}}, c); }),
                  "has shape [6, 4], not 3 chunks of parameter 'a' [3, 4] along dim 0");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"a", chunk_of({2, 4}, 3, 3, 0)}}, c); }),
                  "IR parameter 'a': has checkpoint chunk");
  EXPECT_CONTAINS(error_of([&] { load_parameters({{"a", chunk_of({2, 4}, 0, 3, 2)}}, c); }),
                  "does not fit shape [2, 4]");
}

}  // namespace weights_stack_test
}  // namespace fuselm::weights
