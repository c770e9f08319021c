// JSON nested 100,000 deep, in each file the engine reads: a one-line error naming the file, never
// a stack overflow (ir/json_depth.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "base/json_limited.h"
#include "ir/load.h"
#include "tokenizer/tokenizer.h"
#include "weights/checkpoint.h"
#include "weights/error.h"
#include "weights/safetensors.h"
#include "weights_test_util.h"

namespace fuselm {
namespace json_depth_test {

using weights::test_util::TempDir;
constexpr int kDeep = 100'000;

std::string deep_array() { return std::string(kDeep, '[') + std::string(kDeep, ']'); }

void write(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

template <class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST(JsonDepth, LimitIsExactAndShallowJsonParses) {
  EXPECT_EQ(base::parse_json_limited(std::string("[[1]]"), 2), nlohmann::json::parse("[[1]]"));
  EXPECT_THROW(base::parse_json_limited(std::string("[[[1]]]"), 2), base::JsonTooDeep);
  EXPECT_EQ(base::parse_json_limited(std::string(R"({"a": {"b": [1, {"c": 2}]}})")),
            nlohmann::json::parse(R"({"a": {"b": [1, {"c": 2}]}})"));
}

TEST(JsonDepth, DeepSafetensorsHeader) {
  TempDir dir;
  const std::string header = R"({"x": )" + deep_array() + "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write(dir / "deep.safetensors", bytes + header);
  const std::string m = message_of([&] { weights::SafetensorsFile::open(dir / "deep.safetensors"); });
  EXPECT_NE(m.find("deep.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than"), std::string::npos) << m;
}

TEST(JsonDepth, DeepShardIndex) {
  TempDir dir;
  write(dir / weights::Checkpoint::kIndexName, R"({"weight_map": )" + deep_array() + "}");
  const std::string m = message_of([&] { weights::Checkpoint::open(dir.path()); });
  EXPECT_NE(m.find(weights::Checkpoint::kIndexName), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than"), std::string::npos) << m;
}

TEST(JsonDepth, DeepIrArgs) {
  TempDir dir;
  write(dir / "ir.json", R"({"format":"fuselm-ir","version":1,"capture_version":"0.4.0","ops":{},"modules":[],)"
                         R"("parameters":{},"constants":{},"outputs":[],"nodes":[{"name":"a","op":"aten.view.default",)"
                         R"("args":)" + deep_array() + R"(,"dtype":"f32","shape":[1],"module_stack":[]}]})");
  const std::string m = message_of([&] { ir::load(dir / "ir.json"); });
  EXPECT_NE(m.find("ir.json"), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than"), std::string::npos) << m;
}

TEST(JsonDepth, DeepTokenizerNormalizers) {
  std::string json = R"({"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":)";
  for (int i = 0; i < kDeep / 4; ++i) json += R"({"type":"Sequence","normalizers":[)";
  json += R"({"type":"NFC"})";
  for (int i = 0; i < kDeep / 4; ++i) json += "]}";
  json += "}";
  const std::string m = message_of([&] { tokenizer::Tokenizer::from_json(json, "deep/tokenizer.json"); });
  EXPECT_NE(m.find("deep/tokenizer.json"), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than"), std::string::npos) << m;
}

}  // namespace json_depth_test
}  // namespace fuselm
