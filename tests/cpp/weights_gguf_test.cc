// GgufFile against GGUFs written by the gguf Python package (tests/cpp/data/gguf, made by
// tests/python/make_gguf_fixtures.py, with what the package's GGUFReader reads from each file as
// the oracle) and against hand-corrupted copies of them.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/cpu/quant.h"
#include "weights/gguf.h"
#include "weights/gguf_tensor.h"
#include "weights_test_util.h"

namespace fuselm::weights {
namespace weights_gguf_test {

using test_util::error_of;
using test_util::TempDir;

const std::filesystem::path kData = std::filesystem::path(FUSELM_SOURCE_DIR) / "tests/cpp/data/gguf";

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// The gguf package's type names (GGUFValueType) as ours.
std::string package_type_name(GgufType t) {
  static const char* names[] = {"UINT8", "INT8",  "UINT16", "INT16",  "UINT32", "INT32", "FLOAT32",
                                "BOOL",  "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
  return names[static_cast<uint32_t>(t)];
}

// GGUFReader reports a value as its type chain (ARRAY, ARRAY, INT32) and flattened contents.
void flatten(const GgufValue& v, nlohmann::json& types, nlohmann::json& out) {
  switch (v.type) {
    case GgufType::array:
      types.push_back("ARRAY");
      if (v.elems.empty()) break;
      {
        nlohmann::json sub_types = nlohmann::json::array();
        for (size_t i = 0; i < v.elems.size(); ++i) {
          nlohmann::json t = nlohmann::json::array();
          flatten(v.elems[i], t, out);
          if (i == 0) sub_types = t;
        }
        for (auto& t : sub_types) types.push_back(t);
      }
      break;
    case GgufType::string: types.push_back("STRING"); out.push_back(v.s); break;
    case GgufType::boolean: types.push_back("BOOL"); out.push_back(v.b); break;
    case GgufType::f32: case GgufType::f64: types.push_back(package_type_name(v.type)); out.push_back(v.f); break;
    default:
      types.push_back(package_type_name(v.type));
      if (v.type == GgufType::u8 || v.type == GgufType::u16 || v.type == GgufType::u32 || v.type == GgufType::u64)
        out.push_back(v.u);
      else
        out.push_back(v.i);
  }
}

// Row 0 of a quantized tensor, dequantized, against the package's first values ("row0").
void check_row0(const GgufTensor& t, const nlohmann::json& w) {
  if (!w.contains("row0")) return;
  const auto q = kernels::quant_type_from_ggml(t.type->id);
  ASSERT_TRUE(q.has_value()) << t.type->name;
  std::vector<float> row(static_cast<size_t>(t.ne[0]));
  kernels::dequantize_row(*q, t.bytes.data(), row.data(), t.ne[0]);
  for (size_t j = 0; j < w["row0"].size(); ++j) EXPECT_EQ(row[j], w["row0"][j].get<float>()) << j;
}

void check_against_package(const std::filesystem::path& gguf, const std::filesystem::path& json) {
  SCOPED_TRACE(gguf.string());
  const GgufFile f = GgufFile::open(gguf);
  const nlohmann::json want = read_json(json);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), want["alignment"].get<uint64_t>());
  ASSERT_EQ(f.keys().size(), want["key_order"].size());
  for (size_t i = 0; i < f.keys().size(); ++i) {
    const std::string& key = f.keys()[i];
    EXPECT_EQ(key, want["key_order"][i].get<std::string>());
    nlohmann::json types = nlohmann::json::array(), values = nlohmann::json::array();
    flatten(f.value(key), types, values);
    const nlohmann::json& w = want["metadata"][key];
    EXPECT_EQ(types, w["types"]) << key;
    const nlohmann::json wv = w["value"].is_array() ? w["value"] : nlohmann::json::array({w["value"]});
    ASSERT_EQ(values.size(), wv.size()) << key;
    for (size_t j = 0; j < wv.size(); ++j) {
      if (wv[j].is_number_float())
        EXPECT_EQ(values[j].get<double>(), wv[j].get<double>()) << key;
      else
        EXPECT_EQ(values[j], wv[j]) << key;
    }
  }
  ASSERT_EQ(f.tensors().size(), want["tensors"].size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    const nlohmann::json& w = want["tensors"][i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, w["name"].get<std::string>());
    EXPECT_EQ(t.type->id, w["type"].get<uint32_t>());
    EXPECT_EQ(t.ne, w["ne"].get<std::vector<int64_t>>());
    EXPECT_EQ(t.file_offset, w["data_offset"].get<uint64_t>());
    ASSERT_EQ(t.bytes.size(), w["n_bytes"].get<uint64_t>());
    uint64_t sum = 0;
    for (std::byte b : t.bytes) sum += static_cast<uint8_t>(b);
    EXPECT_EQ(sum, w["byte_sum"].get<uint64_t>());
    for (size_t j = 0; j < w["head"].size(); ++j)
      EXPECT_EQ(static_cast<int>(t.bytes[j]), w["head"][j].get<int>());
    EXPECT_EQ(f.find(t.name), &t);
    check_row0(t, w);
  }
}

TEST(Gguf, MatchesThePackageReader) {
  check_against_package(kData / "basic.gguf", kData / "basic.json");
  check_against_package(kData / "align64.gguf", kData / "align64.json");
}

// A file named by FUSELM_GGUF_FILE against FUSELM_GGUF_EXPECTED (test_gguf_reader.py: the
// default model's llama.cpp-written GGUF and what GGUFReader reads from it).
TEST(Gguf, MatchesThePackageReaderOnAGivenFile) {
  const char* file = std::getenv("FUSELM_GGUF_FILE");
  const char* json = std::getenv("FUSELM_GGUF_EXPECTED");
  if (!file || !json) GTEST_SKIP() << "FUSELM_GGUF_FILE / FUSELM_GGUF_EXPECTED not set (test_gguf_reader.py sets them)";
  check_against_package(file, json);
}

TEST(Gguf, TypedGetters) {
  const GgufFile f = GgufFile::open(kData / "basic.gguf");
  EXPECT_EQ(f.get_string("general.architecture"), "testarch");
  EXPECT_EQ(f.get_uint("test.u32"), 4000000000u);
  EXPECT_EQ(f.get_int("test.i8"), -100);
  EXPECT_EQ(f.get_float("test.f32"), 0.15625);
  EXPECT_EQ(f.get_float("test.u8"), 200.0);
  EXPECT_TRUE(f.get_bool("test.bool"));
  EXPECT_EQ(f.at("plain.3d").shape(), (std::vector<int64_t>{2, 3, 4}));
  const std::string p = (kData / "basic.gguf").string();
  EXPECT_EQ(error_of([&] { f.get_uint("test.i8"); }), p + ": key 'test.i8' is -100, expected a non-negative integer");
  EXPECT_EQ(error_of([&] { f.get_int("test.u64"); }), p + ": key 'test.u64' is 18000000000000000000, beyond the signed 64-bit range");
  EXPECT_EQ(error_of([&] { f.get_string("test.u8"); }), p + ": key 'test.u8' is a u8, expected a string");
  EXPECT_EQ(error_of([&] { f.value("nope"); }), p + ": has no metadata key 'nope'");
  EXPECT_EQ(error_of([&] { f.at("nope"); }), p + ": has no tensor 'nope'");
}

// A copy of a fixture to corrupt, with the positions of its fields.
class Corrupt {
 public:
  explicit Corrupt(const std::string& name = "basic") : bytes_(read_bytes(kData / (name + ".gguf"))) {}

  /// Position just after the length-prefixed string `s` (a key or tensor name).
  size_t after(const std::string& s) const {
    std::string needle(8, '\0');
    const uint64_t n = s.size();
    std::memcpy(needle.data(), &n, 8);
    needle += s;
    const size_t at = bytes_.find(needle);
    EXPECT_NE(at, std::string::npos) << s;
    EXPECT_EQ(bytes_.find(needle, at + 1), std::string::npos) << s << " is not unique";
    return at + needle.size();
  }
  /// Positions in tensor `name`'s info: n_dims, ne[d], type, offset.
  size_t n_dims_at(const std::string& t) const { return after(t); }
  size_t ne_at(const std::string& t, int d) const { return after(t) + 4 + 8 * d; }
  size_t type_at(const std::string& t) const { return after(t) + 4 + 8 * get<uint32_t>(after(t)); }
  size_t offset_at(const std::string& t) const { return type_at(t) + 4; }

  template <class T>
  T get(size_t pos) const {
    T v;
    std::memcpy(&v, bytes_.data() + pos, sizeof(T));
    return v;
  }
  template <class T>
  Corrupt& set(size_t pos, T v) {
    std::memcpy(bytes_.data() + pos, &v, sizeof(T));
    return *this;
  }
  Corrupt& truncate(size_t n) {
    bytes_.resize(n);
    return *this;
  }
  size_t size() const { return bytes_.size(); }

  /// The one-line error of opening the corrupted copy, with the temp path replaced by "F".
  std::string error() const {
    TempDir dir;
    const auto path = dir / "bad.gguf";
    std::ofstream(path, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    std::string e = error_of([&] { GgufFile::open(path); });
    if (e.rfind(path.string(), 0) == 0) e = "F" + e.substr(path.string().size());
    return e;
  }
  /// Calls fn on the opened copy (for changes that must still parse).
  void with_open(const std::function<void(const GgufFile&)>& fn) const {
    TempDir dir;
    const auto path = dir / "ok.gguf";
    std::ofstream(path, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    fn(GgufFile::open(path));
  }
  /// Opens the copy (for corruptions that must still parse).
  uint32_t version_after_open() const {
    TempDir dir;
    const auto path = dir / "ok.gguf";
    std::ofstream(path, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    return GgufFile::open(path).version();
  }

 private:
  std::string bytes_;
};

TEST(Gguf, HeaderErrors) {
  EXPECT_EQ(Corrupt().set<uint32_t>(0, 0x46554746).error(), "F: does not start with the GGUF magic \"GGUF\" (not a GGUF file?)");
  EXPECT_EQ(Corrupt().set<uint32_t>(4, 1).error(), "F: has GGUF version 1; versions 2 and 3 are supported");
  EXPECT_EQ(Corrupt().set<uint32_t>(4, 0x03000000).error(), "F: is a big-endian GGUF; only little-endian files are supported");
  EXPECT_EQ(Corrupt().truncate(10).error(), "F: the file has 10 bytes, fewer than the 24-byte GGUF header (truncated?)");
  EXPECT_EQ(Corrupt().set<uint32_t>(4, 2).version_after_open(), 2u);  // v2 has v3's layout
  EXPECT_CONTAINS(error_of([] { GgufFile::open(kData / "missing.gguf"); }), "missing.gguf: cannot open");
}

TEST(Gguf, LyingTensorCount) {
  Corrupt c;
  const auto n = c.get<uint64_t>(8);
  // One more than there are: the next "tensor info" is the data, read as a name length.
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(8, n + 1).error(), fmt::format("tensor info {} of {} (after tensor 'quant.q6_k')", n, n + 1));
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(8, uint64_t{1} << 40).error(), "F: claims 1099511627776 tensors, more than the");
}

TEST(Gguf, TensorInfoErrors) {
  const std::string t = "quant.q6_k";
  Corrupt c;
  const uint64_t off = c.get<uint64_t>(c.offset_at(t));
  EXPECT_EQ(Corrupt().set<uint32_t>(c.type_at(t), 99).error(), "F: tensor 'quant.q6_k' has unknown ggml type 99");
  EXPECT_EQ(Corrupt().set<uint64_t>(c.offset_at(t), off + 1).error(),
            fmt::format("F: tensor 'quant.q6_k' has offset {}, not a multiple of the alignment 32", off + 1));
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.offset_at(t), off + 4096).error(),
                  "F: tensor 'quant.q6_k' (Q6_K [2, 256], 420 bytes at data offset");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.offset_at(t), off + 4096).error(), "ends past the end of the file");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.offset_at(t), c.get<uint64_t>(c.offset_at("quant.q5_k"))).error(),
                  "F: tensor 'quant.q5_k' (data offset");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.offset_at(t), c.get<uint64_t>(c.offset_at("quant.q5_k"))).error(),
                  "bytes) overlaps tensor 'quant.q6_k'");
  EXPECT_EQ(Corrupt().set<uint32_t>(c.n_dims_at(t), 5).error(), "F: tensor 'quant.q6_k' has 5 dimensions; ggml allows at most 4");
  EXPECT_EQ(Corrupt().set<uint64_t>(c.ne_at(t, 1), uint64_t{1} << 62).error(),
            "F: tensor 'quant.q6_k' has dimension 1 = 4611686018427387904, whose element count overflows");
  EXPECT_EQ(Corrupt().set<uint64_t>(c.ne_at(t, 0), 128).error(),
            "F: tensor 'quant.q6_k' has rows of 128 elements, not a whole number of 256-element Q6_K blocks");
  EXPECT_CONTAINS(Corrupt().truncate(c.size() - 100).error(), "F: tensor 'quant.q6_k' (Q6_K [2, 256], 420 bytes");
  // A name length that runs past the end names the tensor info it belongs to.
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.after("quant.q5_k") - 10 - 8, uint64_t{1} << 50).error(),
                  "name (1125899906842624 bytes)");
}

TEST(Gguf, MetadataErrors) {
  Corrupt c;
  EXPECT_EQ(Corrupt().set<uint32_t>(c.after("test.u8"), 99).error(), "F: key 'test.u8' has unknown value type 99");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.after("test.string") + 4, uint64_t{1} << 40).error(),
                  "F: key 'test.string' (1099511627776 bytes) at byte");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(c.after("test.ints") + 8, uint64_t{1} << 40).error(),
                  "F: key 'test.ints' claims an array of 1099511627776 i32 elements");
  EXPECT_EQ(Corrupt().set<uint8_t>(c.after("test.bool") + 4, 2).error(), "F: key 'test.bool' is a bool holding 2, not 0 or 1");
  EXPECT_CONTAINS(Corrupt().set<uint64_t>(16, uint64_t{1} << 50).error(), "F: claims 1125899906842624 metadata entries");
  // A duplicate key: rename test.u16 to test.i16 (same length).
  Corrupt dup;
  const size_t k = dup.after("test.u16") - 3;
  dup.set<char>(k, 'i');
  EXPECT_EQ(dup.error(), "F: key 'test.i16' appears twice in the metadata");
  Corrupt a("align64");
  EXPECT_EQ(Corrupt("align64").set<uint32_t>(a.after("general.alignment") + 4, 48).error(),
            "F: key 'general.alignment' must be a power-of-two u32, got u32 48");
}

TEST(GgufTensor, SupportedTypes) {
  const GgufFile f = GgufFile::open(kData / "basic.gguf");
  for (const GgufTensor& t : f.tensors()) EXPECT_NO_THROW(check_gguf_type_supported(f, t)) << t.name;
  EXPECT_TRUE(gguf_type_quantized(12));  // Q4_K
  EXPECT_FALSE(gguf_type_quantized(0));  // F32
  // quant.q6_k retyped IQ2_XXS (66-byte 256-blocks: the 2 x 256 tensor still fits its bytes).
  Corrupt c;
  c.set<uint32_t>(c.type_at("quant.q6_k"), 16);
  c.with_open([](const GgufFile& g) {
    EXPECT_EQ(error_of([&] { check_gguf_type_supported(g, g.at("quant.q6_k")); }),
              g.path().string() +
                  ": tensor 'quant.q6_k' has ggml type IQ2_XXS, which fuselm cannot compute with (supported: F32, F16, "
                  "BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1)");
  });
}

TEST(GgufTensor, RopeUnpermuteUndoesLlamaCppsPermute) {
  // llama.cpp (convert_hf_to_gguf.py): w.reshape(n_head, 2, D/2, k).swapaxes(1, 2): GGUF row
  // h·D + 2i + t holds HF row h·D + t·D/2 + i. Two heads of 4 rows:
  EXPECT_EQ(rope_unpermute_rows(8, 2), (std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7}));
  // The inverse of llama.cpp's permutation, on 3 heads of 64 (SmolLM2's k projection).
  const int64_t heads = 3, d = 64;
  const auto src = rope_unpermute_rows(heads * d, heads);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t t = 0; t < 2; ++t) EXPECT_EQ(src[h * d + t * d / 2 + i], h * d + 2 * i + t);
  EXPECT_THROW(rope_unpermute_rows(10, 2), std::invalid_argument);
}

}  // namespace weights_gguf_test
}  // namespace fuselm::weights
