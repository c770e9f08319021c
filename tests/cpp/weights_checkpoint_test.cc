// Checkpoint: a single file, a directory, index.json shards, and their errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "weights/checkpoint.h"
#include "weights/error.h"
#include "weights_test_util.h"

namespace fuselm::weights {
namespace weights_checkpoint_test {

using namespace test_util;
namespace fs = std::filesystem;

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

float f32_at(const TensorView& v, size_t i) {
  float f;
  std::memcpy(&f, static_cast<const char*>(v.data) + 4 * i, 4);
  return f;
}

/// Two shards and the index that maps four keys into them.
void write_sharded(const TempDir& dir) {
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {f32_tensor("embed.weight", {2, 2}, {1, 2, 3, 4}), f32_tensor("layers.0.w", {2}, {5, 6})});
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {bf16_tensor("layers.1.w", {3}, {7, 8, 9}), f32_tensor("norm.weight", {2}, {10, 11})});
  nlohmann::json index = {{"metadata", {{"total_size", 44}}},
                          {"weight_map",
                           {{"embed.weight", "model-00001-of-00002.safetensors"},
                            {"layers.0.w", "model-00001-of-00002.safetensors"},
                            {"layers.1.w", "model-00002-of-00002.safetensors"},
                            {"norm.weight", "model-00002-of-00002.safetensors"}}}};
  write_text(dir / "model.safetensors.index.json", index.dump(2));
}

TEST(WeightsCheckpoint, SingleFileDirectory) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {f32_tensor("w", {2}, {1.5f, 2.5f})});
  Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.files().size(), 1u);
  TensorView v = c.at("w");
  EXPECT_EQ(v.key, "w");
  EXPECT_EQ(v.dtype, DType::f32);
  EXPECT_EQ(std::vector<int64_t>(v.shape.begin(), v.shape.end()), (std::vector<int64_t>{2}));
  EXPECT_EQ(v.nbytes, 8u);
  EXPECT_EQ(f32_at(v, 1), 2.5f);
  EXPECT_EQ(v.file->path(), dir / "model.safetensors");
  EXPECT_FALSE(c.find("nope"));
  EXPECT_EQ(error_of([&] { c.at("nope"); }), dir.path().string() + ": the checkpoint has no tensor 'nope'");
}

TEST(WeightsCheckpoint, OpenAFileDirectly) {
  TempDir dir;
  write_safetensors(dir / "custom.safetensors", {f32_tensor("w", {1}, {3})});
  Checkpoint c = Checkpoint::open(dir / "custom.safetensors");
  EXPECT_EQ(f32_at(c.at("w"), 0), 3.f);
}

TEST(WeightsCheckpoint, IndexShards) {
  TempDir dir;
  write_sharded(dir);
  // A stray file the index does not name is not opened.
  write_safetensors(dir / "consolidated.safetensors", {f32_tensor("embed.weight", {1}, {0})});
  Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"embed.weight", "layers.0.w", "layers.1.w", "norm.weight"}));
  EXPECT_EQ(c.at("embed.weight").file->path().filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(c.at("norm.weight").file->path().filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(f32_at(c.at("embed.weight"), 3), 4.f);
  EXPECT_EQ(f32_at(c.at("norm.weight"), 1), 11.f);
  TensorView b = c.at("layers.1.w");
  EXPECT_EQ(b.dtype, DType::bf16);
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(b.data) + 4, 2);
  EXPECT_EQ(kernels::bf16_to_f32(h), 9.f);
  // Each file is mapped once: tensors of one shard are views into the same mapping.
  EXPECT_EQ(c.at("embed.weight").file, c.at("layers.0.w").file);
  EXPECT_EQ(static_cast<const char*>(c.at("embed.weight").data) + 16, static_cast<const char*>(c.at("layers.0.w").data));
}

TEST(WeightsCheckpoint, MissingShardNamesIt) {
  TempDir dir;
  write_sharded(dir);
  fs::remove(dir / "model-00002-of-00002.safetensors");
  const std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_EQ(msg, (dir / "model.safetensors.index.json").string() +
                     ": names shard 'model-00002-of-00002.safetensors' (2 tensors, e.g. 'layers.1.w') but " +
                     (dir / "model-00002-of-00002.safetensors").string() + " does not exist");
}

TEST(WeightsCheckpoint, TruncatedShardNamesFileAndTensor) {
  TempDir dir;
  write_sharded(dir);
  const fs::path shard = dir / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  const std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_CONTAINS(msg, shard.string() + ": tensor 'norm.weight' ends at byte");
  EXPECT_CONTAINS(msg, "(truncated?)");
}

TEST(WeightsCheckpoint, IndexKeyAbsentFromShard) {
  TempDir dir;
  write_sharded(dir);
  nlohmann::json index = {{"weight_map", {{"embed.weight", "model-00002-of-00002.safetensors"}}}};
  write_text(dir / "model.safetensors.index.json", index.dump());
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir.path()); }),
            (dir / "model-00002-of-00002.safetensors").string() +
                ": has no tensor 'embed.weight', which model.safetensors.index.json places in this shard");
}

TEST(WeightsCheckpoint, BadIndex) {
  TempDir dir;
  write_sharded(dir);
  const fs::path index = dir / "model.safetensors.index.json";
  write_text(index, "{\"weight_map\": {");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), index.string() + ": not valid JSON: ");
  write_text(index, "{\"metadata\": {}}");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), "has no \"weight_map\" object");
  write_text(index, R"({"weight_map": {"w": 3}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), "weight_map['w'] is 3, not a file name");
  write_text(index, R"({"weight_map": {"w": "../model-00001-of-00002.safetensors"}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), "which is not a file inside");
  write_text(index, R"({"weight_map": {}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), "\"weight_map\" is empty");
}

TEST(WeightsCheckpoint, DirectoryErrors) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir.path()); }), "no model.safetensors");
  EXPECT_CONTAINS(error_of([&] { Checkpoint::open(dir / "absent"); }), "no such file or directory");
  // Without an index, a key in two files is ambiguous.
  write_safetensors(dir / "a.safetensors", {f32_tensor("w", {1}, {1})});
  write_safetensors(dir / "b.safetensors", {f32_tensor("w", {1}, {2}), f32_tensor("v", {1}, {2})});
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir.path()); }),
            dir.path().string() +
                ": tensor 'w' is in both a.safetensors and b.safetensors, and there is no "
                "model.safetensors.index.json to choose");
}

TEST(WeightsCheckpoint, SeveralFilesWithoutIndex) {
  TempDir dir;
  write_safetensors(dir / "a.safetensors", {f32_tensor("w", {1}, {1})});
  write_safetensors(dir / "b.safetensors", {f32_tensor("v", {1}, {2})});
  write_text(dir / "config.json", "{}");
  Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(f32_at(c.at("v"), 0), 2.f);
}

TEST(WeightsCheckpoint, CopiesShareMappings) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {f32_tensor("w", {2}, {1, 2})});
  const void* data = nullptr;
  std::optional<Checkpoint> copy;
  {
    Checkpoint c = Checkpoint::open(dir.path());
    data = c.at("w").data;
    copy = c;
  }
  EXPECT_EQ(copy->at("w").data, data);
  EXPECT_EQ(f32_at(copy->at("w"), 1), 2.f);
}

}  // namespace weights_checkpoint_test
}  // namespace fuselm::weights
