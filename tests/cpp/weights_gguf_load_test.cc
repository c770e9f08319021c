// load_gguf_parameters on a GGUF the gguf package wrote (tests/cpp/data/gguf/basic.gguf): blocks
// kept as views where the parameter may be quantized, dequantized (kernels' dequantize_row, itself
// checked against gguf.quants) where not, rows unpermuted as rope_unpermute_rows says, one-line
// errors; quantized stacking as byte concatenation; --dtype q8_0 quantization at load.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/quant.h"
#include "weights/error.h"
#include "weights/gguf.h"
#include "weights/gguf_tensor.h"
#include "weights/load_parameters.h"
#include "weights/quantized.h"
#include "weights/stack.h"

namespace fuselm::weights {
namespace weights_gguf_load_test {

const std::filesystem::path kFile = std::filesystem::path(FUSELM_SOURCE_DIR) / "tests/cpp/data/gguf/basic.gguf";

nlohmann::json entry(const std::string& key, std::vector<int64_t> shape, const std::string& type,
                     nlohmann::json rows = nullptr) {
  return {{"shape", shape}, {"dtype", "f32"},
          {"checkpoint", {{"keys", {key}}, {"converter", nullptr}, {"dtype", type}, {"rows", rows}}}};
}

std::vector<float> dequantized(const GgufTensor& t, kernels::QuantType q) {
  const int64_t k = t.ne[0], n = t.numel() / k;
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t r = 0; r < n; ++r)
    kernels::dequantize_row(q, t.bytes.data() + r * kernels::quant_row_bytes(q, k), out.data() + r * k, k);
  return out;
}

TEST(GgufLoad, QuantizedKeptAsBlocksWhereQuantizableElseDequantized) {
  const GgufFile f = GgufFile::open(kFile);
  nlohmann::json params = {{"a", entry("quant.q4_1", {4, 64}, "Q4_1")},
                           {"b", entry("quant.q8_0", {4, 64}, "Q8_0")},
                           {"c", entry("plain.f32", {3, 5}, "F32")},
                           {"d", entry("quant.q6_k", {2, 256}, "Q6_K")}};
  const std::set<std::string, std::less<>> quantizable = {"a", "d"};
  LoadOptions o;
  o.quantizable = &quantizable;
  LoadedParameters p = load_gguf_parameters(params, kFile, o);
  const WeightView& a = p.at("a");
  ASSERT_TRUE(a.quant);
  EXPECT_EQ(*a.quant, kernels::QuantType::q4_1);
  EXPECT_EQ(a.nbytes(), f.at("quant.q4_1").bytes.size());
  EXPECT_EQ(std::memcmp(a.data, f.at("quant.q4_1").bytes.data(), a.nbytes()), 0);
  EXPECT_EQ(*p.at("d").quant, kernels::QuantType::q6_k);
  const WeightView& b = p.at("b");
  ASSERT_FALSE(b.quant);
  ASSERT_EQ(b.dtype, kernels::DType::f32);
  const auto want = dequantized(f.at("quant.q8_0"), kernels::QuantType::q8_0);
  EXPECT_EQ(std::memcmp(b.data, want.data(), want.size() * 4), 0);
  EXPECT_FALSE(p.at("c").quant);
  // --dtype f32 dequantizes every block tensor.
  LoadOptions f32 = o;
  f32.dtype = DTypePolicy::f32;
  EXPECT_FALSE(load_gguf_parameters(params, kFile, f32).at("a").quant);
}

TEST(GgufLoad, RowsUnpermutedWhole) {
  const GgufFile f = GgufFile::open(kFile);
  nlohmann::json params = {{"q", entry("quant.q4_0", {4, 64}, "Q4_0", {{"unpermute_heads", 1}})}};
  const std::set<std::string, std::less<>> quantizable = {"q"};
  LoadOptions o;
  o.quantizable = &quantizable;
  LoadedParameters p = load_gguf_parameters(params, kFile, o);
  const auto order = rope_unpermute_rows(4, 1);
  ASSERT_EQ(order, (std::vector<int64_t>{0, 2, 1, 3}));
  const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::q4_0, 64);
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(std::memcmp(static_cast<const char*>(p.at("q").data) + r * rb,
                          f.at("quant.q4_0").bytes.data() + order[static_cast<size_t>(r)] * rb, rb), 0) << r;
}

TEST(GgufLoad, OneLineErrorsNameTheTensor) {
  auto message = [](const nlohmann::json& params) -> std::string {
    try {
      load_gguf_parameters(params, kFile);
    } catch (const WeightsError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message({{"a", entry("quant.q4_1", {4, 64}, "Q8_0")}}).find("tensor 'quant.q4_1' has type Q4_1 but the IR expects Q8_0"),
            std::string::npos);
  EXPECT_NE(message({{"a", entry("quant.q4_1", {64, 4}, "Q4_1")}}).find("tensor 'quant.q4_1' has shape [4, 64]"),
            std::string::npos);
  EXPECT_NE(message({{"a", entry("nope", {4, 64}, "Q4_1")}}).find("needs tensor 'nope'"), std::string::npos);
}

// What transformers' tensor processors do on reading, as capture records it (gguf_transform.h):
// an offset and a transpose on f32 values, a block tensor dequantized before its transpose, a row
// order moving whole block rows, a reshape keeping the bytes; malformed transforms are one line.
TEST(GgufLoad, ProcessorTransformsApplied) {
  const GgufFile f = GgufFile::open(kFile);
  auto with = [](nlohmann::json e, const nlohmann::json& fields) {
    for (const auto& [k, v] : fields.items()) e["checkpoint"][k] = v;
    return e;
  };
  nlohmann::json params = {
      {"norm", with(entry("plain.f32", {3, 5}, "F32"), {{"offset", -1.0}})},
      {"conv1d", with(entry("plain.f32", {5, 3}, "F32"), {{"transpose", true}, {"file_shape", {3, 5}}})},
      {"qt", with(entry("quant.q8_0", {64, 4}, "Q8_0"), {{"transpose", true}, {"file_shape", {4, 64}}})},
      {"rows", entry("quant.q4_0", {4, 64}, "Q4_0", {{"order", {3, 1, 0, 2}}})},
      {"reshaped", with(entry("quant.q4_1", {4, 1, 64}, "Q4_1"), {{"file_shape", {4, 64}}})}};
  const std::set<std::string, std::less<>> quantizable = {"rows"};
  LoadOptions o;
  o.quantizable = &quantizable;
  LoadedParameters p = load_gguf_parameters(params, kFile, o);
  const auto* x = reinterpret_cast<const float*>(f.at("plain.f32").bytes.data());
  const auto* norm = static_cast<const float*>(p.at("norm").data);
  const auto* conv = static_cast<const float*>(p.at("conv1d").data);
  EXPECT_EQ(p.at("conv1d").shape, (std::vector<int64_t>{5, 3}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(norm[i * 5 + j], x[i * 5 + j] - 1.0f);
      EXPECT_EQ(conv[j * 3 + i], x[i * 5 + j]);
    }
  const auto deq = dequantized(f.at("quant.q8_0"), kernels::QuantType::q8_0);
  const auto* qt = static_cast<const float*>(p.at("qt").data);
  ASSERT_FALSE(p.at("qt").quant);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 64; ++j) EXPECT_EQ(qt[j * 4 + i], deq[static_cast<size_t>(i * 64 + j)]);
  ASSERT_TRUE(p.at("rows").quant);
  const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::q4_0, 64);
  const int64_t order[] = {3, 1, 0, 2};
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(std::memcmp(static_cast<const char*>(p.at("rows").data) + r * rb,
                          f.at("quant.q4_0").bytes.data() + order[r] * rb, rb), 0) << r;
  EXPECT_EQ(p.at("reshaped").shape, (std::vector<int64_t>{4, 1, 64}));
  const auto q41 = dequantized(f.at("quant.q4_1"), kernels::QuantType::q4_1);
  EXPECT_EQ(std::memcmp(p.at("reshaped").data, q41.data(), q41.size() * 4), 0);

  auto message = [&](const nlohmann::json& e) -> std::string {
    try {
      load_gguf_parameters(nlohmann::json{{"x", e}}, kFile);
    } catch (const WeightsError& err) {
      return err.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(entry("quant.q4_0", {4, 64}, "Q4_0", {{"order", {0, 0, 1, 2}}})).find("not a permutation of the file's 4 rows"),
            std::string::npos);
  EXPECT_NE(message(with(entry("plain.f32", {3, 5}, "F32"), {{"transpose", true}})).find("which is not its transpose"),
            std::string::npos);
  EXPECT_NE(message(with(entry("plain.f32", {3, 5}, "F32"), {{"offset", "one"}})).find("not a number"), std::string::npos);
  EXPECT_NE(message(with(entry("plain.f32", {3, 5}, "F32"), {{"map", "sqrt"}})).find("not one of \"log\""),
            std::string::npos);
}

// An elementwise map (Mamba's A, stored as -exp(A_log) and read back through log(-a)) is applied
// in f32 after the offset; each map against its <cmath> definition.
TEST(GgufLoad, ElementMapApplied) {
  const GgufFile f = GgufFile::open(kFile);
  const auto* x = reinterpret_cast<const float*>(f.at("plain.f32").bytes.data());
  const std::pair<const char*, float (*)(float)> maps[] = {
      {"log", [](float v) { return std::log(v); }},
      {"log_neg", [](float v) { return std::log(-v); }},
      {"exp", [](float v) { return std::exp(v); }},
      {"neg_exp", [](float v) { return -std::exp(v); }}};
  for (const auto& [name, fn] : maps) {
    nlohmann::json e = entry("plain.f32", {3, 5}, "F32");
    e["checkpoint"]["map"] = name;
    LoadedParameters p = load_gguf_parameters(nlohmann::json{{"a", e}}, kFile);
    const auto* got = static_cast<const float*>(p.at("a").data);
    ASSERT_EQ(p.at("a").dtype, kernels::DType::f32);
    for (int i = 0; i < 15; ++i) {
      const float want = fn(x[i]);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got[i])) << name << " " << i;
      else
        EXPECT_EQ(got[i], want) << name << " " << i;
    }
  }
}

TEST(GgufLoad, QuantizedStackIsByteConcatenation) {
  nlohmann::json params = {{"x", entry("quant.q4_0", {4, 64}, "Q4_0")}, {"y", entry("quant.q4_1", {4, 64}, "Q4_1")},
                           {"z", entry("quant.q4_0", {4, 64}, "Q4_0")}};
  const std::set<std::string, std::less<>> quantizable = {"x", "y", "z"};
  LoadOptions o;
  o.quantizable = &quantizable;
  LoadedParameters p = load_gguf_parameters(params, kFile, o);
  std::vector<AlignedBuffer> buffers;
  const WeightView s = stack({"s", {"x", "z"}, 0, {8, 64}}, p, buffers);
  ASSERT_TRUE(s.quant);
  EXPECT_EQ(s.nbytes(), 2 * p.at("x").nbytes());
  EXPECT_EQ(std::memcmp(s.data, p.at("x").data, p.at("x").nbytes()), 0);
  // Different block types: each source dequantized, the stack requantized to Q8_0 by ggml's
  // reference quantizer (byte for byte), within amax/254 of each part's values plus the f16 scale's
  // rounding (127·|d - f16(d)| <= amax/2048; bound taken as amax/1024).
  const WeightView mixed = stack({"m", {"x", "y"}, 0, {8, 64}}, p, buffers);
  ASSERT_TRUE(mixed.quant);
  EXPECT_EQ(*mixed.quant, kernels::QuantType::q8_0);
  EXPECT_EQ(mixed.nbytes(), 8 * kernels::quant_row_bytes(kernels::QuantType::q8_0, 64));
  const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::q8_0, 64);
  for (int r = 0; r < 8; ++r) {
    std::vector<float> part(64), got(64);
    const auto t = r < 4 ? kernels::QuantType::q4_0 : kernels::QuantType::q4_1;
    const auto* rows = static_cast<const char*>(p.at(r < 4 ? "x" : "y").data);
    kernels::dequantize_row(t, rows + (r % 4) * kernels::quant_row_bytes(t, 64), part.data(), 64);
    std::vector<unsigned char> want(static_cast<size_t>(rb));
    kernels::quantize_row(kernels::QuantType::q8_0, part.data(), want.data(), 64);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(mixed.data) + r * rb, want.data(), static_cast<size_t>(rb)), 0) << r;
    kernels::dequantize_row(kernels::QuantType::q8_0, static_cast<const char*>(mixed.data) + r * rb, got.data(), 64);
    for (int b = 0; b < 2; ++b) {
      float amax = 0.f;
      for (int j = 32 * b; j < 32 * b + 32; ++j) amax = std::max(amax, std::fabs(part[j]));
      for (int j = 32 * b; j < 32 * b + 32; ++j) EXPECT_LE(std::fabs(got[j] - part[j]), amax * (1.f / 254.f + 1.f / 1024.f)) << r << " " << j;
    }
  }
}

TEST(GgufLoad, QuantizeAtLoadMatchesReferenceQuantizer) {
  std::vector<float> x(3 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 101) - 50) / 7.0f;
  std::vector<AlignedBuffer> buffers;
  const WeightView v = quantize_tensor(x.data(), kernels::DType::f32, {3, 64}, kernels::QuantType::q8_0, buffers);
  const int64_t rb = kernels::quant_row_bytes(kernels::QuantType::q8_0, 64);
  std::vector<unsigned char> want(static_cast<size_t>(rb));
  for (int r = 0; r < 3; ++r) {
    kernels::quantize_row(kernels::QuantType::q8_0, x.data() + r * 64, want.data(), 64);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(v.data) + r * rb, want.data(), static_cast<size_t>(rb)), 0);
  }
  EXPECT_EQ(parse_dtype_policy("q4_0"), DTypePolicy::q4_0);
  EXPECT_FALSE(quantizable_shape(kernels::QuantType::q4_0, std::vector<int64_t>{4, 48}));
}

}  // namespace weights_gguf_load_test
}  // namespace fuselm::weights
