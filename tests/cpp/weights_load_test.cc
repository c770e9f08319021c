// load_parameters: binding the IR's parameter table to checkpoint tensors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/large_alloc.h"
#include "weights/error.h"
#include "weights/load_parameters.h"
#include "weights_test_util.h"

namespace fuselm::weights {
namespace weights_load_test {

using namespace test_util;
namespace fs = std::filesystem;
using kernels::DType;

const std::string kRecapture = "(the checkpoint changed since capture? re-run capture)";

float value(const WeightView& v, int64_t i) { return kernels::load_as_f32(v.data, v.dtype, i); }

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

struct Fixture {
  TempDir dir;
  fs::path file = dir / "model.safetensors";
  explicit Fixture(const std::vector<StTensor>& tensors) { write_safetensors(file, tensors); }
  Checkpoint open() const { return Checkpoint::open(dir.path()); }
};

TEST(WeightsLoad, AutoKeepsF32AndBf16ZeroCopy) {
  Fixture fx({f32_tensor("w", {2, 2}, {1, 2, 3, 4}), bf16_tensor("b", {3}, {0.5f, -1.f, 256.f})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"layer.w", ir_param("w", {2, 2}, "F32")}, {"layer.b", ir_param("b", {3}, "BF16")}};
  LoadedParameters p = load_parameters(params, c);
  ASSERT_EQ(p.size(), 2u);
  const WeightView& w = p.at("layer.w");
  EXPECT_EQ(w.dtype, DType::f32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(w.checkpoint_key, "w");
  EXPECT_FALSE(w.owned);
  EXPECT_EQ(w.data, c.at("w").data);  // a view into the mapping
  EXPECT_EQ(value(w, 3), 4.f);
  EXPECT_EQ(w.nbytes(), 16u);
  const WeightView& b = p.at("layer.b");
  EXPECT_EQ(b.dtype, DType::bf16);
  EXPECT_FALSE(b.owned);
  EXPECT_EQ(b.data, c.at("b").data);
  EXPECT_EQ(value(b, 2), 256.f);
  EXPECT_EQ(p.owned_bytes(), 0u);
  EXPECT_EQ(p.find("nope"), nullptr);
  EXPECT_CONTAINS(error_of([&] { p.at("nope"); }), "no loaded parameter 'nope'");
}

// From 2 MiB up a tensor the engine would read in place is copied onto huge pages instead
// (weights/huge_page_copy.h), with the file's values; smaller ones stay views.
TEST(WeightsLoad, LargeTensorsAreCopiedOntoHugePages) {
  if (!huge_pages_advised()) GTEST_SKIP() << "FUSELM_HUGE_PAGES=0";
  const int64_t rows = 1024, cols = 520;  // 2.03 MiB of f32
  std::vector<float> big(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * 0.5f;
  Fixture fx({f32_tensor("big", {rows, cols}, big), f32_tensor("small", {2}, {1, 2})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"big", ir_param("big", {rows, cols}, "F32")}, {"small", ir_param("small", {2}, "F32")}};
  LoadedParameters p = load_parameters(params, c);
  const WeightView& b = p.at("big");
  EXPECT_TRUE(b.owned);
  EXPECT_NE(b.data, c.at("big").data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % (uintptr_t{2} << 20), 0u);
  for (int64_t i : {int64_t{0}, int64_t{1}, rows * cols / 2 + 7, rows * cols - 1})
    EXPECT_EQ(value(b, i), big[static_cast<size_t>(i)]) << i;
  EXPECT_EQ(p.owned_bytes(), b.nbytes());
  EXPECT_FALSE(p.at("small").owned);
}

TEST(WeightsLoad, AutoWidensF16UnlessKept) {
  Fixture fx({f16_tensor("h", {3}, {0.5f, -2.f, 65504.f})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"h", ir_param("h", {3}, "F16")}};
  LoadedParameters p = load_parameters(params, c);
  const WeightView& h = p.at("h");
  EXPECT_EQ(h.dtype, DType::f32);
  EXPECT_TRUE(h.owned);
  EXPECT_TRUE(aligned64(h.data));
  EXPECT_EQ(value(h, 0), 0.5f);
  EXPECT_EQ(value(h, 1), -2.f);
  EXPECT_EQ(value(h, 2), 65504.f);

  LoadedParameters k = load_parameters(params, c, {.dtype = DTypePolicy::auto_, .keep_f16 = true});
  EXPECT_EQ(k.at("h").dtype, DType::f16);
  EXPECT_FALSE(k.at("h").owned);
  EXPECT_EQ(value(k.at("h"), 2), 65504.f);
}

TEST(WeightsLoad, F32PolicyWidensExactly) {
  // Values with all 8 bf16 mantissa bits and all 11 f16 mantissa bits set, subnormal f16, inf.
  const std::vector<float> bvals = {1.9921875f, -3.0e38f, 1e-30f, std::numeric_limits<float>::infinity()};
  const std::vector<float> hvals = {1.9990234375f, 5.9604645e-08f, -65504.f};
  Fixture fx({f32_tensor("f", {1}, {0.1f}), bf16_tensor("b", {4}, bvals), f16_tensor("h", {3}, hvals)});
  Checkpoint c = fx.open();
  nlohmann::json params = {
      {"b", ir_param("b", {4}, "BF16")}, {"h", ir_param("h", {3}, "F16")}, {"f", ir_param("f", {1}, "F32")}};
  LoadedParameters p = load_parameters(params, c, {.dtype = DTypePolicy::f32});
  const WeightView& b = p.at("b");
  EXPECT_EQ(b.dtype, DType::f32);
  EXPECT_TRUE(b.owned);
  EXPECT_TRUE(aligned64(b.data));
  for (size_t i = 0; i < bvals.size(); ++i)
    EXPECT_EQ(static_cast<const float*>(b.data)[i], kernels::bf16_to_f32(kernels::f32_to_bf16(bvals[i]))) << i;
  EXPECT_EQ(static_cast<const float*>(b.data)[0], 1.9921875f);
  EXPECT_TRUE(std::isinf(static_cast<const float*>(b.data)[3]));
  const WeightView& h = p.at("h");
  EXPECT_EQ(h.dtype, DType::f32);
  EXPECT_TRUE(aligned64(h.data));
  EXPECT_EQ(static_cast<const float*>(h.data)[0], 1.9990234375f);
  EXPECT_EQ(static_cast<const float*>(h.data)[1], 5.9604645e-08f);  // the smallest f16 subnormal
  EXPECT_EQ(static_cast<const float*>(h.data)[2], -65504.f);
  EXPECT_FALSE(p.at("f").owned);  // already f32
  EXPECT_EQ(p.owned_bytes(), 4u * 4 + 3u * 4);
}

TEST(WeightsLoad, Bf16PolicyRoundsToNearestEven) {
  const float one = 1.f;
  const std::vector<float> vals = {
      one + 0x1p-8f,            // halfway between 1 and 1+2^-7: ties to even -> 1
      one + 3 * 0x1p-8f,        // halfway between 1+2^-7 and 1+2^-6: ties to even -> 1+2^-6
      one + 0x1p-8f + 0x1p-20f, // just above halfway -> 1+2^-7
      one + 0x1p-9f,            // below halfway -> 1
      -2.5f,                    // exact
      std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      3.4028235e38f,            // max float rounds up to bf16 inf
  };
  Fixture fx({f32_tensor("w", {8}, vals), bf16_tensor("b", {1}, {3.f})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"w", ir_param("w", {8}, "F32")}, {"b", ir_param("b", {1}, "BF16")}};
  LoadedParameters p = load_parameters(params, c, {.dtype = DTypePolicy::bf16});
  const WeightView& w = p.at("w");
  EXPECT_EQ(w.dtype, DType::bf16);
  EXPECT_TRUE(w.owned);
  EXPECT_TRUE(aligned64(w.data));
  EXPECT_EQ(w.nbytes(), 16u);
  const auto* h = static_cast<const uint16_t*>(w.data);
  EXPECT_EQ(h[0], 0x3f80);  // 1.0
  EXPECT_EQ(h[1], 0x3f82);  // 1 + 2^-6
  EXPECT_EQ(h[2], 0x3f81);  // 1 + 2^-7
  EXPECT_EQ(h[3], 0x3f80);
  EXPECT_EQ(kernels::bf16_to_f32(h[4]), -2.5f);
  EXPECT_EQ(h[5], 0x7f80);
  EXPECT_TRUE(std::isnan(kernels::bf16_to_f32(h[6])));
  EXPECT_EQ(h[7], 0x7f80);
  EXPECT_FALSE(p.at("b").owned);  // already bf16
}

TEST(WeightsLoad, TiedParametersShareMemory) {
  Fixture fx({bf16_tensor("model.embed_tokens.weight", {3, 2}, {1, 2, 3, 4, 5, 6})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"model.embed_tokens.weight", ir_param("model.embed_tokens.weight", {3, 2}, "BF16")},
                           {"lm_head.weight", ir_param("model.embed_tokens.weight", {3, 2}, "BF16")}};
  params["lm_head.weight"]["checkpoint"]["tied_to"] = "model.embed_tokens.weight";
  for (DTypePolicy policy : {DTypePolicy::auto_, DTypePolicy::f32, DTypePolicy::bf16}) {
    LoadedParameters p = load_parameters(params, c, {.dtype = policy});
    const WeightView& e = p.at("model.embed_tokens.weight");
    const WeightView& l = p.at("lm_head.weight");
    EXPECT_EQ(e.data, l.data) << dtype_policy_name(policy);
    EXPECT_EQ(e.dtype, l.dtype);
    EXPECT_EQ(l.checkpoint_key, "model.embed_tokens.weight");
    EXPECT_EQ(value(l, 5), 6.f);
    // Converted once: one buffer.
    EXPECT_EQ(p.owned_bytes(), policy == DTypePolicy::f32 ? 6u * 4 : 0u);
  }
}

TEST(WeightsLoad, RetainOnlyFreesBuffersNoKeptParameterReads) {
  Fixture fx({f32_tensor("q", {2, 2}, {1, 2, 3, 4}), f32_tensor("k", {1, 2}, {5, 6}),
              f32_tensor("e", {3, 2}, {1, 2, 3, 4, 5, 6})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"q.weight", ir_param("q", {2, 2}, "F32")}, {"k.weight", ir_param("k", {1, 2}, "F32")},
                           {"embed.weight", ir_param("e", {3, 2}, "F32")}, {"head.weight", ir_param("e", {3, 2}, "F32")}};
  LoadedParameters p = load_parameters(params, c, {.dtype = DTypePolicy::bf16});
  EXPECT_EQ(p.owned_bytes(), (4u + 2u + 6u) * 2);
  // q and k were stacked elsewhere; the tied head keeps the embedding's buffer alive.
  EXPECT_EQ(p.retain_only({"head.weight"}), (4u + 2u) * 2);
  EXPECT_EQ(p.size(), 1u);
  EXPECT_EQ(p.owned_bytes(), 6u * 2);
  EXPECT_EQ(p.find("q.weight"), nullptr);
  EXPECT_EQ(p.find("embed.weight"), nullptr);
  EXPECT_EQ(value(p.at("head.weight"), 5), 6.f);
  EXPECT_EQ(p.retain_only({}), 6u * 2);
  EXPECT_EQ(p.owned_bytes(), 0u);
}

TEST(WeightsLoad, TiedToADifferentKeyIsAnError) {
  Fixture fx({f32_tensor("a", {1}, {1}), f32_tensor("b", {1}, {2})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"x", ir_param("a", {1}, "F32")}, {"y", ir_param("b", {1}, "F32")}};
  params["y"]["checkpoint"]["tied_to"] = "x";
  EXPECT_EQ(error_of([&] { load_parameters(params, c); }),
            "IR parameter 'y' is tied to 'x' but reads checkpoint key 'b', not 'a'");
}

TEST(WeightsLoad, MissingKeyNamesKeyAndDirectory) {
  Fixture fx({f32_tensor("w", {1}, {1})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"layer.v", ir_param("v", {1}, "F32")}};
  EXPECT_EQ(error_of([&] { load_parameters(params, c); }),
            fx.dir.path().string() +
                ": parameter 'layer.v' needs checkpoint key 'v', which the checkpoint does not have (capture found it "
                "in model.safetensors) " + kRecapture);
}

TEST(WeightsLoad, DtypeMismatchSinceCapture) {
  Fixture fx({bf16_tensor("model.layers.0.w", {2}, {1, 2})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"p", ir_param("model.layers.0.w", {2}, "F32")}};
  EXPECT_EQ(error_of([&] { load_parameters(params, c); }),
            "tensor 'model.layers.0.w' in " + fx.file.string() + " has dtype BF16 but the IR expects F32 " + kRecapture);
}

TEST(WeightsLoad, ShapeMismatchPrintsBothShapes) {
  Fixture fx({f32_tensor("w", {2, 3}, {1, 2, 3, 4, 5, 6})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"layer.w", ir_param("w", {3, 2}, "F32")}};
  EXPECT_EQ(error_of([&] { load_parameters(params, c); }),
            "tensor 'w' in " + fx.file.string() +
                " has shape [2, 3] but the IR expects [3, 2] for parameter 'layer.w' " + kRecapture);
}

TEST(WeightsLoad, ConverterIsNotSupportedYet) {
  Fixture fx({f32_tensor("w", {1}, {1})});
  Checkpoint c = fx.open();
  nlohmann::json params = {{"experts.gate_up_proj", ir_param("w", {1}, "F32")}};
  params["experts.gate_up_proj"]["checkpoint"]["converter"] = "MergeModulelist(dim=0)";
  EXPECT_EQ(error_of([&] { load_parameters(params, c); }),
            "parameter experts.gate_up_proj needs checkpoint conversion 'MergeModulelist(dim=0)', which this engine "
            "does not support yet");
}

TEST(WeightsLoad, MalformedTableEntries) {
  Fixture fx({f32_tensor("w", {1}, {1}), {"ids", "I64", {1}, raw_bytes(std::vector<int64_t>{3})}});
  Checkpoint c = fx.open();
  EXPECT_CONTAINS(error_of([&] { load_parameters(nlohmann::json::array(), c); }), "not an object");
  nlohmann::json two = {{"p", ir_param("w", {1}, "F32")}};
  two["p"]["checkpoint"]["keys"] = {"w", "v"};
  EXPECT_CONTAINS(error_of([&] { load_parameters(two, c); }), "IR parameter 'p': maps to checkpoint keys [\"w\",\"v\"]");
  nlohmann::json noshape = {{"p", {{"dtype", "f32"}, {"checkpoint", {{"keys", {"w"}}}}}}};
  EXPECT_CONTAINS(error_of([&] { load_parameters(noshape, c); }), "IR parameter 'p': has no \"shape\" list");
  nlohmann::json nockpt = {{"p", {{"shape", {1}}, {"dtype", "f32"}}}};
  EXPECT_CONTAINS(error_of([&] { load_parameters(nockpt, c); }), "has no \"checkpoint\" object");
  nlohmann::json ints = {{"p", ir_param("ids", {1}, "I64")}};
  EXPECT_EQ(error_of([&] { load_parameters(ints, c); }),
            "tensor 'ids' in " + fx.file.string() + " has dtype I64; parameter 'p' needs F32, BF16 or F16");
}

TEST(WeightsLoad, MisalignedTensorIsCopiedAligned) {
  // A 1-element BF16 tensor first leaves the F32 tensor after it at a 2-byte offset.
  Fixture fx({bf16_tensor("b", {1}, {1}), f32_tensor("w", {3}, {1.5f, 2.5f, 3.5f})});
  Checkpoint c = fx.open();
  ASSERT_NE(reinterpret_cast<uintptr_t>(c.at("w").data) % 4, 0u);
  LoadedParameters p = load_parameters({{"w", ir_param("w", {3}, "F32")}}, c);
  const WeightView& w = p.at("w");
  EXPECT_TRUE(w.owned);
  EXPECT_EQ(w.dtype, DType::f32);
  EXPECT_TRUE(aligned64(w.data));
  EXPECT_EQ(static_cast<const float*>(w.data)[2], 3.5f);
}

TEST(WeightsLoad, OutlivesTheCheckpoint) {
  Fixture fx({f32_tensor("w", {2}, {4, 5})});
  std::optional<LoadedParameters> p;
  {
    Checkpoint c = fx.open();
    p = load_parameters({{"w", ir_param("w", {2}, "F32")}}, c);
  }
  EXPECT_FALSE(p->at("w").owned);
  EXPECT_EQ(static_cast<const float*>(p->at("w").data)[1], 5.f);
}

TEST(WeightsLoad, ManyShardsLargeConversion) {
  // Two shards and a tensor large enough to take the parallel conversion path.
  TempDir dir;
  std::vector<float> big(1 << 19);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 256) - 128.f;  // integers below 256: exact in bf16
  write_safetensors(dir / "s1.safetensors", {bf16_tensor("big", {1 << 10, 1 << 9}, big)});
  write_safetensors(dir / "s2.safetensors", {f32_tensor("small", {1}, {7})});
  {
    nlohmann::json index = {{"weight_map", {{"big", "s1.safetensors"}, {"small", "s2.safetensors"}}}};
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  }
  Checkpoint c = Checkpoint::open(dir.path());
  nlohmann::json params = {{"big", ir_param("big", {1 << 10, 1 << 9}, "BF16", "s1.safetensors")},
                           {"small", ir_param("small", {1}, "F32", "s2.safetensors")}};
  LoadedParameters p = load_parameters(params, c, {.dtype = DTypePolicy::f32});
  const auto* f = static_cast<const float*>(p.at("big").data);
  for (size_t i = 0; i < big.size(); i += 997) EXPECT_EQ(f[i], big[i]) << i;  // exact in bf16
  EXPECT_EQ(f[big.size() - 1], big.back());
  EXPECT_EQ(value(p.at("small"), 0), 7.f);
}

TEST(WeightsLoad, DtypePolicyNames) {
  EXPECT_EQ(parse_dtype_policy("auto"), DTypePolicy::auto_);
  EXPECT_EQ(parse_dtype_policy("f32"), DTypePolicy::f32);
  EXPECT_EQ(parse_dtype_policy("bf16"), DTypePolicy::bf16);
  EXPECT_EQ(parse_dtype_policy("q8_0"), DTypePolicy::q8_0);
  EXPECT_EQ(error_of([] { parse_dtype_policy("fp8"); }), "unknown weight dtype 'fp8' (choose auto, f32, bf16, q8_0 or q4_0)");
}

}  // namespace weights_load_test
}  // namespace fuselm::weights
