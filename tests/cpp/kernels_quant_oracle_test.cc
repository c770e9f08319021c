// Block dequantization and the q8_0 / q4_0 quantizers against the gguf Python package
// (gguf.quants), on the cases tests/python/quant_oracle.py writes: the committed
// tests/cpp/data/quant/oracle.gguf, or the file FUSELM_QUANT_ORACLE names (test_gguf_quants.py
// writes a fresh one per run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/cpu/quant.h"
#include "weights/gguf.h"

namespace fuselm::kernels {
namespace kernels_quant_oracle_test {

std::filesystem::path oracle_path() {
  if (const char* p = std::getenv("FUSELM_QUANT_ORACLE"); p && *p) return p;
  return std::filesystem::path(FUSELM_SOURCE_DIR) / "tests/cpp/data/quant/oracle.gguf";
}

std::vector<float> floats(const weights::GgufTensor& t) {
  EXPECT_EQ(t.type->id, 0u) << t.name;
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

class QuantOracle : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantOracle, DequantizeMatchesThePackage) {
  const QuantType type = GetParam();
  const weights::GgufFile f = weights::GgufFile::open(oracle_path());
  const std::string name = quant_info(type).name;
  const weights::GgufTensor& blocks = f.at(name + ".blocks");
  ASSERT_EQ(blocks.type->id, quant_info(type).ggml_type);
  const std::vector<float> want = floats(f.at(name + ".dequant"));
  const int64_t k = blocks.ne[0], rows = blocks.ne[1];
  ASSERT_EQ(static_cast<int64_t>(want.size()), k * rows);
  std::vector<float> got(want.size());
  const int64_t row_bytes = quant_row_bytes(type, k);
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, blocks.bytes.data() + r * row_bytes, got.data() + r * k, k);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ < 5)  // bit for bit
      ADD_FAILURE() << name << " element " << i << ": " << got[i] << ", gguf.quants " << want[i];
}

class QuantOracleQuantize : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantOracleQuantize, MatchesThePackageByteForByte) {
  const QuantType type = GetParam();
  const weights::GgufFile f = weights::GgufFile::open(oracle_path());
  const std::string name = quant_info(type).name;
  const std::vector<float> x = floats(f.at(name + ".input"));
  const weights::GgufTensor& want = f.at(name + ".quant");
  const int64_t k = want.ne[0], rows = want.ne[1];
  std::vector<unsigned char> got(want.bytes.size());
  const int64_t row_bytes = quant_row_bytes(type, k);
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, x.data() + r * k, got.data() + r * row_bytes, k);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != static_cast<unsigned char>(want.bytes[i]) && bad++ < 5)
      ADD_FAILURE() << name << " byte " << i << " (block " << i / quant_info(type).block_bytes << "): " << int(got[i])
                    << ", gguf.quants " << int(want.bytes[i]);
}

std::string type_name(const ::testing::TestParamInfo<QuantType>& info) { return quant_info(info.param).name; }

INSTANTIATE_TEST_SUITE_P(Types, QuantOracle, ::testing::ValuesIn(kAllQuantTypes), type_name);
INSTANTIATE_TEST_SUITE_P(Types, QuantOracleQuantize, ::testing::Values(QuantType::q8_0, QuantType::q4_0), type_name);

}  // namespace kernels_quant_oracle_test
}  // namespace fuselm::kernels
