// Unit tests of the tokenizer: streaming decode, UTF-8 handling, tokenizer.json errors, and small
// hand-built pipelines. Parity with HF tokenizers on real configurations is in
// tests/python/test_tokenizer.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace tokenizer_test {

using nlohmann::json;

// A byte-level BPE: ids 0..255 are the bytes, then the merged tokens of `merges` in order.
json byte_level_spec(const std::vector<std::pair<std::string, std::string>>& merges = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::char_of(static_cast<unsigned char>(b))] = b;
  json merge_list = json::array();
  std::uint32_t next = 256;
  for (const auto& [a, b] : merges) {
    std::string ma, mb;
    byte_level::encode(a, ma);
    byte_level::encode(b, mb);
    vocab[ma + mb] = next++;
    merge_list.push_back({ma, mb});
  }
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", next}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

Tokenizer load(const json& spec) { return Tokenizer::from_json(spec.dump()); }

std::string error_of_text(const std::string& text) {
  try {
    Tokenizer::from_json(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string error_of(const json& spec) { return error_of_text(spec.dump()); }

TEST(TokenizerStream, HoldsBackPartialUtf8) {
  const Tokenizer tok = load(byte_level_spec());
  StreamDecoder stream(tok);
  // "é" is C3 A9: one byte-token each.
  EXPECT_EQ(stream.step(0xC3), "");
  EXPECT_EQ(stream.step(0xA9), "é");
  // U+1F600 is F0 9F 98 80, split over four tokens, then an ASCII byte.
  EXPECT_EQ(stream.step(0xF0), "");
  EXPECT_EQ(stream.step(0x9F), "");
  EXPECT_EQ(stream.step(0x98), "");
  EXPECT_EQ(stream.step(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.step('a'), "a");
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerStream, InvalidBytesAndFlush) {
  const Tokenizer tok = load(byte_level_spec());
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.step(0xFF), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(stream.step(0xE2), "");
  EXPECT_EQ(stream.step('x'), "\xEF\xBF\xBDx");  // E2 then 'x': the E2 is an invalid subpart
  EXPECT_EQ(stream.step(0xE2), "");
  EXPECT_EQ(stream.step(0x82), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // stream ends inside a character
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerStream, ConcatenationEqualsDecode) {
  const Tokenizer tok = load(byte_level_spec({{"h", "e"}, {"he", "l"}, {"\xC3", "\xA9"}}));
  const std::string text = "hello wörld 👋🏽 <|end|> 中文 é";
  const std::vector<std::uint32_t> ids = tok.encode(text);
  for (bool skip : {false, true}) {
    StreamDecoder stream(tok, skip);
    std::string streamed;
    for (std::uint32_t id : ids) streamed += stream.step(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok.decode(ids, skip));
  }
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode(ids, true), "hello wörld 👋🏽  中文 é");
}

TEST(TokenizerUtf8, LossyUsesMaximalSubparts) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8::lossy("ok"), "ok");
  EXPECT_EQ(utf8::lossy("\xE2\x82" "A"), fffd + "A");
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98"), fffd);
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(utf8::lossy("\xC0\xAF"), fffd + fffd);             // overlong
  EXPECT_EQ(utf8::stable_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::stable_prefix("ab\xFF"), 3u);
  EXPECT_TRUE(utf8::is_valid("é👋"));
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));
}

TEST(TokenizerEncode, MergesInBothFormsAndSpecialTokens) {
  json spec = byte_level_spec({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {" ", "w"}});
  const Tokenizer a = load(spec);
  for (auto& m : spec["model"]["merges"]) {
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  const Tokenizer b = load(spec);
  const std::vector<std::uint32_t> ids = a.encode("hello world<|end|>");
  EXPECT_EQ(ids, b.encode("hello world<|end|>"));
  const std::uint32_t hell = *a.token_to_id("hell"), end = *a.token_to_id("<|end|>");
  const std::uint32_t space_w = *a.token_to_id(byte_level::char_of(' ') + "w");
  EXPECT_EQ(ids, (std::vector<std::uint32_t>{hell, 'o', space_w, 'o', 'r', 'l', 'd', end}));
  EXPECT_TRUE(a.is_special(end));
  EXPECT_EQ(a.vocab_size(), end + 1);
  EXPECT_THROW(a.encode("bad \xFF utf8"), std::runtime_error);
}

TEST(TokenizerEncode, TemplateAddsBos) {
  json spec = byte_level_spec();
  spec["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<|end|>", {{"id", "<|end|>"}, {"ids", {256}}, {"tokens", {"<|end|>"}}}}}},
  };
  const Tokenizer tok = load(spec);
  EXPECT_EQ(tok.encode("a"), (std::vector<std::uint32_t>{256, 'a'}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<std::uint32_t>{'a'}));
  EXPECT_EQ(tok.encode(""), (std::vector<std::uint32_t>{256}));
}

TEST(TokenizerEncode, NfcNormalizer) {
  json spec = byte_level_spec();
  spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  const Tokenizer tok = load(spec);
  EXPECT_EQ(tok.encode("e\xCC\x81"), (std::vector<std::uint32_t>{0xC3, 0xA9}));  // e + U+0301 -> é
  EXPECT_EQ(tok.decode(tok.encode("cafe\xCC\x81")), "caf\xC3\xA9");
}

TEST(TokenizerDecode, NoDecoderJoinsWithSpaces) {
  json spec = byte_level_spec();
  spec["decoder"] = nullptr;
  const Tokenizer tok = load(spec);
  const std::vector<std::uint32_t> ids{'a', 'b', 256, 999999};
  EXPECT_EQ(tok.decode(ids), "a b <|end|>");
  EXPECT_EQ(tok.decode(ids, true), "a b");
}

TEST(TokenizerErrors, MalformedJson) {
  EXPECT_EQ(error_of_text("{\"model\": ").rfind("tokenizer.json: malformed JSON: ", 0), 0u)
      << error_of_text("{\"model\": ");
  EXPECT_EQ(error_of_text("[1, 2]"), "tokenizer.json: (root) must be a JSON object");
}

TEST(TokenizerErrors, UnsupportedComponents) {
  EXPECT_EQ(error_of(json{{"model", {{"type", "WordLevel"}, {"vocab", json::object()}}}}),
            "tokenizer.json: model type 'WordLevel' is not supported");

  json spec = byte_level_spec();
  spec["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Digits"}}, {{"type", "UnicodeScripts"}}}}};
  EXPECT_EQ(error_of(spec), "tokenizer.json: pre_tokenizer.pretokenizers[1].type "
                            "'UnicodeScripts' is not supported");

  spec = byte_level_spec();
  spec["normalizer"] = {{"type", "Nmt"}};
  EXPECT_EQ(error_of(spec), "tokenizer.json: normalizer.type 'Nmt' is not supported");

  spec = byte_level_spec();
  spec["decoder"] = {{"type", "CTC"}};
  EXPECT_EQ(error_of(spec), "tokenizer.json: decoder.type 'CTC' is not supported");

  spec = byte_level_spec();
  spec["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_EQ(error_of(spec), "tokenizer.json: post_processor.cls is missing");
}

TEST(TokenizerErrors, BadFields) {
  json spec = byte_level_spec();
  spec["model"].erase("vocab");
  EXPECT_EQ(error_of(spec), "tokenizer.json: model.vocab is missing");

  spec = byte_level_spec();
  spec["model"]["merges"] = json::array({json::array({"zz", "q"})});
  EXPECT_EQ(error_of(spec), "tokenizer.json: model.merges[0] 'zz' is not in model.vocab");

  spec = byte_level_spec();
  spec["model"]["merges"] = json::array({"a b c"});
  EXPECT_EQ(error_of(spec), "tokenizer.json: model.merges[0] must be two tokens separated by one "
                            "space, got 'a b c'");

  spec = byte_level_spec();
  spec["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                           {"behavior", "Isolated"}, {"invert", false}};
  const std::string regex_error = error_of(spec);
  const std::string want = "tokenizer.json: pre_tokenizer.pattern.Regex regex does not compile";
  EXPECT_EQ(regex_error.rfind(want, 0), 0u) << regex_error;

  spec = byte_level_spec();
  spec["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}},
                           {"behavior", "Sideways"}, {"invert", false}};
  EXPECT_EQ(error_of(spec), "tokenizer.json: pre_tokenizer.behavior 'Sideways' is not supported");

  spec = byte_level_spec();
  spec["model"]["vocab"]["a"] = -3;
  EXPECT_EQ(error_of(spec),
            "tokenizer.json: model.vocab.a must be a non-negative integer, got number");
}

TEST(TokenizerErrors, MissingFile) {
  try {
    Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/dir/tokenizer.json: cannot open");
  }
}

}  // namespace tokenizer_test
}  // namespace fuselm::tokenizer
