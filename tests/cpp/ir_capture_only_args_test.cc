// An argument only capture may fill (fuselm.attention's key_select: a sparse attention's key
// selection, which capture proves to be every key and removes) is refused at load when an IR holds
// a value for it, naming the node; none loads as before (docs/ir.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ir/load.h"
#include "weights_test_util.h"

namespace fuselm::ir {
namespace {

const std::string kFixture = std::string(FUSELM_SOURCE_DIR) + "/tests/cpp/data/fusers/attn_scale_opt.json";

/// The fixture with its first attention op's key_select set to `value`, written under dir.
std::filesystem::path with_key_select(const weights::test_util::TempDir& dir, const nlohmann::json& value) {
  std::ifstream in(kFixture);
  nlohmann::json ir = nlohmann::json::parse(in);
  const auto& names = ir.at("ops").at("fuselm.attention.default").at("args");
  const size_t at = static_cast<size_t>(std::find(names.begin(), names.end(), "key_select") - names.begin());
  for (auto& n : ir.at("nodes")) {
    if (n.at("op") != "fuselm.attention.default") continue;
    // a value: the op's own q, the ref form every tensor argument takes
    n["args"][at] = value.is_null() ? value : nlohmann::json{{"ref", n.at("args").at(0).at("ref")}};
    break;
  }
  const auto path = dir / "ir.json";
  std::ofstream(path) << ir.dump();
  return path;
}

TEST(CaptureOnlyArgs, KeySelectWithAValueIsRefusedNamingTheNode) {
  weights::test_util::TempDir dir;
  try {
    load(with_key_select(dir, "ref"));
    ADD_FAILURE() << "loaded an attention op with a key selection";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fuselm.attention.default has a value for key_select"), std::string::npos) << m;
    EXPECT_NE(m.find("ir.json"), std::string::npos) << m;
  }
}

TEST(CaptureOnlyArgs, KeySelectNoneLoads) {
  weights::test_util::TempDir dir;
  const Graph g = load(with_key_select(dir, nullptr));
  EXPECT_FALSE(g.nodes.empty());
}

}  // namespace
}  // namespace fuselm::ir
