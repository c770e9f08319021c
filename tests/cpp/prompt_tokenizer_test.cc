// PromptTokenizer: the special-token rule of a model applied to plain text, nothing added to a
// rendered chat template. The rule's sources (GGUF flags, tokenizer.json) are tested against
// transformers in tests/python/test_prompt_ids.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/prompt_tokenizer.h"

namespace fuselm::tokenizer {
namespace prompt_tokenizer_test {

using nlohmann::json;
using Ids = std::vector<std::uint32_t>;

// Byte-level tokens 0..255, <bos> = 256, <eos> = 257; the post_processor puts <eos> after A.
Tokenizer byte_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::char_of(static_cast<unsigned char>(b))] = b;
  const json added = {{{"id", 256}, {"content", "<bos>"}, {"special", true}, {"normalized", false}},
                      {{"id", 257}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}};
  const json post = {{"type", "TemplateProcessing"},
                     {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}}}},
                     {"special_tokens", {{"<eos>", {{"id", "<eos>"}, {"ids", {257}}, {"tokens", {"<eos>"}}}}}}};
  const json spec = {{"added_tokens", added},
                     {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                     {"post_processor", post},
                     {"decoder", {{"type", "ByteLevel"}}},
                     {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  return Tokenizer::from_json(spec.dump());
}

TEST(PromptTokenizer, PostProcessorRule) {
  const PromptTokenizer t(byte_tokenizer(), SpecialTokenRules{});
  EXPECT_EQ(t.encode("ab"), (Ids{'a', 'b', 257}));
  EXPECT_EQ(t.encode("ab", false), (Ids{'a', 'b'}));
  EXPECT_EQ(t.encode_rendered("<bos>ab"), (Ids{256, 'a', 'b'}));
}

TEST(PromptTokenizer, ExplicitRuleReplacesThePostProcessor) {
  const PromptTokenizer t(byte_tokenizer(), SpecialTokenRules{false, {256}, {}, "model.gguf"});
  EXPECT_EQ(t.encode("ab"), (Ids{256, 'a', 'b'}));
  EXPECT_EQ(t.encode(""), (Ids{256}));
  EXPECT_EQ(t.encode("<eos>a", false), (Ids{257, 'a'}));
  // A template writes its own BOS: the rendered text gets no second one.
  EXPECT_EQ(t.encode_rendered("<bos>ab"), (Ids{256, 'a', 'b'}));
  const PromptTokenizer both(byte_tokenizer(), SpecialTokenRules{false, {256}, {257}, "model.gguf"});
  EXPECT_EQ(both.encode("a"), (Ids{256, 'a', 257}));
}

TEST(PromptTokenizer, RuleNamingAnIdOutsideTheVocabularyIsRefused) {
  try {
    PromptTokenizer(byte_tokenizer(), SpecialTokenRules{false, {258}, {}, "x.gguf: tokenizer.ggml.add_bos_token"});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "x.gguf: tokenizer.ggml.add_bos_token: token id 258 is not in the tokenizer's vocabulary (258 ids)");
  }
}

}  // namespace prompt_tokenizer_test
}  // namespace fuselm::tokenizer
