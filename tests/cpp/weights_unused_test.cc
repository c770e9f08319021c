// find_unused_tensors: checkpoint tensors no IR parameter reads, and which look like whole blocks.
#include <gtest/gtest.h>

#include "weights/unused_tensors.h"

namespace fuselm::weights {
namespace {

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

}  // namespace
}  // namespace fuselm::weights
