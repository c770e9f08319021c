// Unit tests of the SentencePiece-family pieces of the tokenizer: Unigram's Viterbi, the
// precompiled charsmap (a hand-built double-array trie), Metaspace pre-tokenizer and decoder,
// ByteFallback in streaming, and WordPiece's greedy match. Parity with HF tokenizers on real
// vocabularies is in tests/python/test_tokenizer_spm.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/precompiled.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unigram_model.h"

namespace fuselm::tokenizer {
namespace tokenizer_spm_test {

using nlohmann::json;
using Ids = std::vector<std::uint32_t>;

const std::string kSpace = "\xE2\x96\x81";  // ▁

Tokenizer load(const json& spec) { return Tokenizer::from_json(spec.dump()); }

std::string streamed(const Tokenizer& tok, const Ids& ids) {
  StreamDecoder stream(tok);
  std::string out;
  for (std::uint32_t id : ids) out += stream.step(id);
  return out + stream.flush();
}

TEST(TokenizerUnigram, ViterbiPicksTheBestTotalScore) {
  // "abc": ab + c = -3.5 beats a + b + c = -4 and abc = -5.
  UnigramModel m({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -1.5}, {"abc", -5}, {"c", -2}}, 0,
                 false);
  Ids ids;
  m.tokenize("abc", ids);
  EXPECT_EQ(ids, (Ids{3, 5}));
  // Unknown characters fuse into one unk piece; known ones around them stay.
  ids.clear();
  m.tokenize("axyzb", ids);
  EXPECT_EQ(ids, (Ids{1, 0, 2}));
  const auto pieces = m.segment("axyzb");
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a", "xyz", "b"}));
}

TEST(TokenizerUnigram, TiesKeepTheShorterFirstPieceAndByteFallback) {
  // "ab" = a + b (-2) = ab (-2): the first candidate found for an end position (from the
  // earliest start) keeps it; a later one must be strictly better.
  UnigramModel m({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -2}, {"<0xC3>", -9}, {"<0xA9>", -9}},
                 0, true);
  Ids ids;
  m.tokenize("ab", ids);
  EXPECT_EQ(ids, (Ids{3}));
  ids.clear();
  m.tokenize("\xC3\xA9" "a", ids);  // é is not a piece: its bytes are
  EXPECT_EQ(ids, (Ids{4, 5, 1}));
  ids.clear();
  m.tokenize("\xE4\xB8\xAD", ids);  // 中: no byte pieces for E4 B8 AD, so unk
  EXPECT_EQ(ids, (Ids{0}));
  UnigramModel no_unk({{"a", -1}}, std::nullopt, false);
  EXPECT_THROW(no_unk.tokenize("b", ids), std::runtime_error);
}

// A double-array trie with keys "A" -> "xyz" and "AB" -> "q", built by hand in darts-clone's
// layout: a unit's offset is bits 10.., bit 8 marks a leaf child, the low byte is the label.
std::string tiny_charsmap() {
  std::vector<std::uint32_t> units(0x44, 0);
  units[0] = 1u << 10;                               // root: children at 1 ^ byte
  units[0x40] = (1u << 10) | (1u << 8) | 0x41;       // 'A' (1 ^ 0x41), leaf at 0x40 ^ 1
  units[0x41] = 0;                                   // value: offset 0 ("xyz")
  units[0x03] = (1u << 10) | (1u << 8) | 0x42;       // 'B' under 'A' (0x41 ^ 0x42)
  units[0x02] = 4;                                   // value: offset 4 ("q")
  std::string blob(4, '\0');
  const std::uint32_t size = static_cast<std::uint32_t>(units.size() * 4);
  for (int i = 0; i < 4; ++i) blob[i] = static_cast<char>((size >> (8 * i)) & 0xFF);
  for (std::uint32_t u : units) {
    for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
  blob += std::string("xyz\0q\0", 6);
  return blob;
}

TEST(TokenizerCharsmap, ShortestPrefixAndGraphemes) {
  const PrecompiledCharsmap map(tiny_charsmap(), "test");
  EXPECT_EQ(map.transform("A"), "xyz");
  EXPECT_EQ(map.transform("AB"), "xyz");  // the shortest key wins, as in HF
  EXPECT_EQ(map.transform("B"), std::nullopt);
  EXPECT_EQ(map.normalize("bAc"), "bxyzc");
  EXPECT_EQ(map.normalize("AB"), "xyzB");  // two graphemes, looked up one by one
  // "A" + U+0301 is one grapheme under 6 bytes: looked up whole, so its prefix "A" replaces all.
  EXPECT_EQ(map.normalize("A\xCC\x81!"), "xyz!");
  // A grapheme of 6 bytes or more goes character by character.
  EXPECT_EQ(map.normalize("A\xCC\x81\xCC\x81\xCC\x81"), "xyz\xCC\x81\xCC\x81\xCC\x81");
}

TEST(TokenizerCharsmap, MalformedBlobs) {
  EXPECT_THROW(PrecompiledCharsmap("\x01\x00", "m"), std::runtime_error);
  std::string blob = tiny_charsmap();
  blob[0] = 0x7F;  // trie size larger than the blob
  EXPECT_THROW(PrecompiledCharsmap(blob, "m"), std::runtime_error);
  EXPECT_EQ(base64_decode("eHl6", "b"), "xyz");
  EXPECT_THROW(base64_decode("e*", "b"), std::runtime_error);
}

// A SentencePiece-style BPE: pieces ▁, a, b, ▁a, ▁b, byte tokens for 中, and "<s>" as an
// added token.
json spm_spec(const std::string& scheme) {
  json vocab = {{"<s>", 0}, {kSpace, 1}, {"a", 2}, {"b", 3}, {kSpace + "a", 4}, {kSpace + "b", 5},
                {"<0xE4>", 6}, {"<0xB8>", 7}, {"<0xAD>", 8}};
  return {
      {"added_tokens", {{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme},
        {"split", false}}},
      {"decoder", {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"byte_fallback", true},
        {"merges", json::array({json::array({kSpace, "a"}), json::array({kSpace, "b"})})}}},
  };
}

TEST(TokenizerMetaspace, PrependSchemes) {
  const Tokenizer first = load(spm_spec("first"));
  EXPECT_EQ(first.encode("a b"), (Ids{4, 5}));
  // Only the piece at the start of the input gets the prefix: not the one after "<s>".
  EXPECT_EQ(first.encode("<s>a b"), (Ids{0, 2, 5}));
  const Tokenizer always = load(spm_spec("always"));
  EXPECT_EQ(always.encode("<s>a b"), (Ids{0, 4, 5}));
  const Tokenizer never = load(spm_spec("never"));
  EXPECT_EQ(never.encode("a b"), (Ids{2, 5}));
  // Decoding drops the replacement characters of the first token, except with "never".
  EXPECT_EQ(first.decode(Ids{4, 5}), "a b");
  EXPECT_EQ(never.decode(Ids{4, 5}), " a b");
  EXPECT_EQ(streamed(first, Ids{4, 5, 1, 4}), "a b  a");
}

TEST(TokenizerMetaspace, ByteFallbackStreamsWholeCharacters) {
  json spec = spm_spec("first");
  spec["decoder"] = {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                       {{"type", "ByteFallback"}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const Tokenizer tok = load(spec);
  EXPECT_EQ(tok.encode("a\xE4\xB8\xAD"), (Ids{4, 6, 7, 8}));  // 中 falls back to bytes
  EXPECT_EQ(tok.decode(Ids{4, 6, 7, 8}), "a\xE4\xB8\xAD");
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.step(4), "a");
  EXPECT_EQ(stream.step(6), "");
  EXPECT_EQ(stream.step(7), "");
  // The run is held until a non-byte token closes it: one more byte could make the whole run
  // invalid, which HF decodes as one U+FFFD per byte.
  EXPECT_EQ(stream.step(8), "");
  EXPECT_EQ(stream.step(5), "\xE4\xB8\xAD b");
  // An invalid byte run decodes to one U+FFFD per byte (HF's rule, not the lossy one).
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok.decode(Ids{6, 7, 5}), fffd + fffd + " b");
  EXPECT_EQ(streamed(tok, Ids{6, 7, 5}), fffd + fffd + " b");
  EXPECT_EQ(streamed(tok, Ids{4, 6, 7}), "a" + fffd + fffd);
}

TEST(TokenizerWordPiece, GreedyLongestMatch) {
  json vocab = {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"unaff", 4}, {"##a", 5},
                {"x", 6}};
  const Tokenizer tok = load({
      {"pre_tokenizer", {{"type", "WhitespaceSplit"}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"}, {"vocab", vocab}, {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"}, {"max_input_chars_per_word", 9}}},
  });
  EXPECT_EQ(tok.encode("unaffable x"), (Ids{4, 3, 6}));
  EXPECT_EQ(tok.encode("unaffablea"), (Ids{0}));  // 10 characters > 9
  EXPECT_EQ(tok.encode("unq x"), (Ids{0, 6}));    // an unmatched part makes the word unk
  EXPECT_EQ(tok.decode(Ids{4, 3, 6}), "unaffable x");
}

TEST(TokenizerUnicode, ClassesOfHfTokenizers) {
  EXPECT_TRUE(unicode::is_mark(0x301));   // Mn
  EXPECT_TRUE(unicode::is_mark(0x93F));   // Mc: a combining mark, which StripAccents removes
  EXPECT_FALSE(unicode::is_nonspacing_mark(0x93F));  // BertNormalizer keeps it
  EXPECT_FALSE(unicode::is_mark('a'));
  EXPECT_TRUE(unicode::is_bert_punctuation('$'));  // ASCII punctuation, though Sc
  EXPECT_TRUE(unicode::is_bert_punctuation(0x3002));
  EXPECT_FALSE(unicode::is_bert_punctuation('a'));
  EXPECT_TRUE(unicode::is_bert_removed(0));
  EXPECT_TRUE(unicode::is_bert_removed(0xFFFD));
  EXPECT_FALSE(unicode::is_bert_removed('\t'));
  std::string lower;
  unicode::append_lowercase(lower, 0x130);
  EXPECT_EQ(lower, "i\xCC\x87");
}

}  // namespace tokenizer_spm_test
}  // namespace fuselm::tokenizer
