// SafetensorsFile: reading values of every float dtype, raw dtypes, and every header error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "weights/error.h"
#include "weights/safetensors.h"
#include "weights_test_util.h"

namespace fuselm::weights {
namespace weights_safetensors_test {

using namespace test_util;
namespace fs = std::filesystem;

template <typename T>
T at(const TensorInfo& t, size_t i) {
  T v;
  std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

TEST(WeightsSafetensors, ReadsF32Bf16F16Values) {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  write_safetensors(p, {f32_tensor("a.weight", {2, 3}, {1, 2, 3, -4, 5.5f, 1e-3f}),
                        bf16_tensor("b", {4}, {1.0f, -2.5f, 0.15625f, 65536.f}),
                        f16_tensor("c", {1, 2}, {0.5f, -3.25f})},
                    {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::open(p, {.willneed = true});
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata()["format"], "pt");
  EXPECT_EQ(f.file_size(), fs::file_size(p));

  const TensorInfo& a = f.at("a.weight");
  EXPECT_EQ(a.dtype, DType::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.numel(), 6);
  ASSERT_EQ(a.bytes.size(), 24u);
  EXPECT_EQ(at<float>(a, 0), 1.f);
  EXPECT_EQ(at<float>(a, 4), 5.5f);
  EXPECT_EQ(at<float>(a, 5), 1e-3f);

  const TensorInfo& b = f.at("b");
  EXPECT_EQ(b.dtype, DType::bf16);
  ASSERT_EQ(b.bytes.size(), 8u);
  EXPECT_EQ(kernels::bf16_to_f32(at<uint16_t>(b, 1)), -2.5f);
  EXPECT_EQ(kernels::bf16_to_f32(at<uint16_t>(b, 2)), 0.15625f);
  EXPECT_EQ(kernels::bf16_to_f32(at<uint16_t>(b, 3)), 65536.f);

  const TensorInfo& c = f.at("c");
  EXPECT_EQ(c.dtype, DType::f16);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(kernels::f16_to_f32(at<uint16_t>(c, 0)), 0.5f);
  EXPECT_EQ(kernels::f16_to_f32(at<uint16_t>(c, 1)), -3.25f);

  // The bytes are views into the mapping: right after the header.
  EXPECT_EQ(f.data_offset() % 8, 0u);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_CONTAINS(error_of([&] { f.at("missing"); }), "has no tensor 'missing'");
}

TEST(WeightsSafetensors, RawDtypesAndEmptyTensors) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  write_safetensors(p, {{"ids", "I64", {2}, raw_bytes(std::vector<int64_t>{7, -9})},
                        {"i32", "I32", {1}, raw_bytes(std::vector<int32_t>{42})},
                        {"mask", "BOOL", {3}, std::string("\x01\x00\x01", 3)},
                        {"u8", "U8", {2}, std::string("\xff\x10", 2)},
                        {"d", "F64", {1}, raw_bytes(std::vector<double>{0.25})},
                        {"empty", "F32", {0, 4}, ""},
                        {"scalar", "F32", {}, raw_bytes(std::vector<float>{3.f})}});
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.at("ids").dtype, DType::i64);
  EXPECT_EQ(at<int64_t>(f.at("ids"), 1), -9);
  EXPECT_EQ(at<int32_t>(f.at("i32"), 0), 42);
  EXPECT_EQ(f.at("mask").dtype, DType::boolean);
  EXPECT_EQ(static_cast<int>(f.at("mask").bytes[2]), 1);
  EXPECT_EQ(static_cast<int>(f.at("u8").bytes[0]), 255);
  EXPECT_EQ(at<double>(f.at("d"), 0), 0.25);
  EXPECT_EQ(f.at("empty").numel(), 0);
  EXPECT_EQ(f.at("empty").bytes.size(), 0u);
  EXPECT_EQ(f.at("scalar").numel(), 1);
  EXPECT_EQ(at<float>(f.at("scalar"), 0), 3.f);
}

TEST(WeightsSafetensors, DtypeNames) {
  for (auto [name, size] : {std::pair{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"I64", 8}, {"BOOL", 1}, {"F8_E4M3", 1}}) {
    auto d = parse_file_dtype(name);
    ASSERT_TRUE(d) << name;
    EXPECT_EQ(file_dtype_name(*d), name);
    EXPECT_EQ(dtype_size(*d), size);
  }
  EXPECT_FALSE(parse_file_dtype("f32"));
}

TEST(WeightsSafetensors, OverlappingTensorsAreAllowed) {
  TempDir dir;
  const fs::path p = dir / "o.safetensors";
  std::string data = raw_bytes(std::vector<float>{1, 2, 3, 4});
  nlohmann::json h = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  write_raw(p, h.dump(), data);
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(at<float>(f.at("b"), 0), 3.f);
  EXPECT_EQ(f.at("a").bytes.data() + 8, f.at("b").bytes.data());
}

TEST(WeightsSafetensors, TruncatedFileNamesTensorAndSizes) {
  TempDir dir;
  const fs::path p = dir / "model-00002-of-00002.safetensors";
  write_safetensors(p, {f32_tensor("model.layers.0.w", {4}, {1, 2, 3, 4}),
                        f32_tensor("model.layers.3.mlp.up_proj.weight", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
  const auto full = fs::file_size(p);
  fs::resize_file(p, full - 5);
  const std::string msg = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_EQ(msg, p.string() + ": tensor 'model.layers.3.mlp.up_proj.weight' ends at byte " + std::to_string(full) +
                     " but the file has " + std::to_string(full - 5) + " bytes (truncated?)");
}

TEST(WeightsSafetensors, HeaderLengthBeyondFile) {
  TempDir dir;
  const fs::path p = dir / "h.safetensors";
  write_raw(p, "{}", "", /*header_len=*/1000);
  std::string msg = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_CONTAINS(msg, p.string() + ": header length 1000 goes past the end of the file, which has 10 bytes");

  write_raw(p, "{}", "", /*header_len=*/int64_t{1} << 40);
  msg = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_CONTAINS(msg, "exceeds the safetensors limit");
}

TEST(WeightsSafetensors, FileShorterThanHeaderLength) {
  TempDir dir;
  const fs::path p = dir / "short.safetensors";
  { std::ofstream(p, std::ios::binary) << "abc"; }
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(p); }), "the file has 3 bytes, fewer than the 8-byte header length");
  fs::resize_file(p, 0);
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(p); }), "the file has 0 bytes");
}

TEST(WeightsSafetensors, MissingFileAndDirectory) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(dir / "nope.safetensors"); }), "nope.safetensors: cannot open");
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(dir.path()); }), "not a regular file");
}

TEST(WeightsSafetensors, InvalidJsonHeader) {
  TempDir dir;
  const fs::path p = dir / "j.safetensors";
  write_raw(p, "{\"a\": {\"dtype\": \"F32\",", "");
  std::string msg = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_CONTAINS(msg, p.string() + ": the 22-byte header is not valid JSON: ");

  write_raw(p, "[1, 2]", "");
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(p); }), "the header is JSON array, not an object of tensors");
}

TEST(WeightsSafetensors, BadTensorEntries) {
  TempDir dir;
  const fs::path p = dir / "e.safetensors";
  const std::string data(16, '\0');
  auto open_with = [&](const nlohmann::json& entry) {
    write_raw(p, nlohmann::json{{"t.w", entry}}.dump(), data);
    return error_of([&] { SafetensorsFile::open(p); });
  };
  EXPECT_CONTAINS(open_with({{"dtype", "F31"}, {"shape", {4}}, {"data_offsets", {0, 16}}}),
                  "tensor 't.w' has unknown dtype \"F31\"");
  EXPECT_CONTAINS(open_with({{"shape", {4}}, {"data_offsets", {0, 16}}}), "tensor 't.w' has no \"dtype\"");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}),
                  "tensor 't.w' has shape [-4], whose dimensions must be non-negative integers");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {2.5}}, {"data_offsets", {0, 16}}}), "non-negative integers");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0}}}), "\"data_offsets\"");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {16, 0}}}), "end before they begin");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}),
                  "tensor 't.w' has data_offsets [0, 16] (16 bytes) but shape [3] of F32 needs 12 bytes");
  EXPECT_CONTAINS(open_with({{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {0, 16}}}), "of BF16 needs 8 bytes");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {uint64_t{1} << 62, 8}}, {"data_offsets", {0, 16}}}),
                  "overflows");
  EXPECT_CONTAINS(open_with({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {4, 20}}}),
                  "tensor 't.w' ends at byte");
  EXPECT_CONTAINS(open_with("F32"), "tensor 't.w' has header entry \"F32\", not an object");
}

TEST(WeightsSafetensors, DuplicateTensorName) {
  TempDir dir;
  const fs::path p = dir / "d.safetensors";
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  write_raw(p, "{\"x\":" + e + ",\"x\":" + e + "}", std::string(4, '\0'));
  EXPECT_CONTAINS(error_of([&] { SafetensorsFile::open(p); }), "tensor 'x' appears twice in the header");
}

TEST(WeightsSafetensors, MoveKeepsMappingValid) {
  TempDir dir;
  const fs::path p = dir / "m.safetensors";
  write_safetensors(p, {f32_tensor("w", {2}, {7, 8})});
  SafetensorsFile a = SafetensorsFile::open(p);
  const std::byte* before = a.at("w").bytes.data();
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.at("w").bytes.data(), before);
  EXPECT_EQ(at<float>(b.at("w"), 1), 8.f);
}

}  // namespace weights_safetensors_test
}  // namespace fuselm::weights
