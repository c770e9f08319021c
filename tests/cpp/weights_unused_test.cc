// find_unused_tensors: checkpoint tensors no IR parameter reads, and which look like whole blocks.
#include <gtest/gtest.h>

#include "weights/unused_tensors.h"

namespace fuselm::weights {
namespace weights_unused_test {

nlohmann::json table(const std::vector<std::vector<std::string>>& keys_per_param) {
  nlohmann::json t = nlohmann::json::object();
  for (size_t i = 0; i < keys_per_param.size(); ++i)
    t["p" + std::to_string(i)] = {{"shape", {1}}, {"checkpoint", {{"keys", keys_per_param[i]}, {"converter", nullptr}}}};
  return t;
}

TEST(WeightsUnused, NothingUnread) {
  const auto u = find_unused_tensors(table({{"a.0.w"}, {"a.1.w"}}), {"a.0.w", "a.1.w"});
  EXPECT_TRUE(u.keys.empty());
  EXPECT_TRUE(u.beyond_read.empty());
}

TEST(WeightsUnused, LayersBeyondTheHighestReadAreWholeBlocks) {
  // The graph reads layers 0 and 1; the checkpoint has a layer 2 and 3 of the same shape of name.
  const auto u = find_unused_tensors(table({{"m.layers.0.q.weight"}, {"m.layers.1.q.weight"}, {"m.norm.weight"}}),
                                     {"m.layers.0.q.weight", "m.layers.1.q.weight", "m.layers.2.q.weight",
                                      "m.layers.3.q.weight", "m.norm.weight"});
  EXPECT_EQ(u.keys, (std::vector<std::string>{"m.layers.2.q.weight", "m.layers.3.q.weight"}));
  EXPECT_EQ(u.beyond_read, u.keys);
  EXPECT_EQ(u.highest_read, "m.layers.1.q.weight");
}

TEST(WeightsUnused, ExpertsBeyondTheHighestReadAreWholeBlocks) {
  // Stacked experts: one parameter reads experts 0..1 of layer 0; the checkpoint has expert 2 too.
  const auto u = find_unused_tensors(table({{"l.0.experts.0.up", "l.0.experts.1.up"}}),
                                     {"l.0.experts.0.up", "l.0.experts.1.up", "l.0.experts.2.up"});
  EXPECT_EQ(u.beyond_read, (std::vector<std::string>{"l.0.experts.2.up"}));
  EXPECT_EQ(u.highest_read, "l.0.experts.1.up");
}

TEST(WeightsUnused, OtherUnreadTensorsAreOnlyReported) {
  // A tied head the graph does not read, a rotary buffer, a gap below the highest read index: none is
  // a block beyond the graph's.
  const auto u = find_unused_tensors(table({{"m.embed.weight"}, {"m.layers.0.w"}, {"m.layers.2.w"}}),
                                     {"lm_head.weight", "m.embed.weight", "m.layers.0.rotary.inv_freq",
                                      "m.layers.0.w", "m.layers.1.w", "m.layers.2.w"});
  EXPECT_EQ(u.keys, (std::vector<std::string>{"lm_head.weight", "m.layers.0.rotary.inv_freq", "m.layers.1.w"}));
  EXPECT_TRUE(u.beyond_read.empty());
}

TEST(WeightsUnused, IntegersMustBeWholeComponents) {
  // "h10" is a name, not an index: "h9" read does not make "h10" a block beyond it.
  const auto u = find_unused_tensors(table({{"t.h9.w"}}), {"t.h9.w", "t.h10.w"});
  EXPECT_EQ(u.keys, (std::vector<std::string>{"t.h10.w"}));
  EXPECT_TRUE(u.beyond_read.empty());
}

TEST(WeightsUnused, UnreadModulesAreCountedNotUnused) {
  // A multimodal wrapper: the graph reads the language model; capture listed the vision tower (two
  // numbered blocks, one beyond anything read at its position) as a module the model does not read.
  const nlohmann::json unread = nlohmann::json::parse(R"([{"module": "model.vision_tower",
      "checkpoint_prefix": "vision_tower.", "keys": ["vision_tower.layers.0.w", "vision_tower.layers.5.w"]}])");
  const auto u = find_unused_tensors(table({{"lm.layers.0.w"}, {"lm.layers.1.w"}}),
                                     {"lm.layers.0.w", "lm.layers.1.w", "lm.layers.2.w", "vision_tower.layers.0.w",
                                      "vision_tower.layers.5.w"},
                                     unread);
  EXPECT_EQ(u.keys, (std::vector<std::string>{"lm.layers.2.w"}));  // still a layer beyond the graph's
  EXPECT_EQ(u.beyond_read, u.keys);
  ASSERT_EQ(u.unread_modules.size(), 1u);
  EXPECT_EQ(u.unread_modules[0].module, "model.vision_tower");
  EXPECT_EQ(u.unread_modules[0].checkpoint_prefix, "vision_tower.");
  EXPECT_EQ(u.unread_modules[0].tensors, 2u);
}

TEST(WeightsUnused, WithoutTheRecordAnUnreadTowerIsUnused) {
  // The same keys with no unread_modules record: the tower's tensors are plain unused tensors.
  const auto u = find_unused_tensors(table({{"lm.layers.0.w"}}), {"lm.layers.0.w", "vision_tower.layers.0.w"});
  EXPECT_EQ(u.keys, (std::vector<std::string>{"vision_tower.layers.0.w"}));
  EXPECT_TRUE(u.unread_modules.empty());
}

}  // namespace weights_unused_test
}  // namespace fuselm::weights
