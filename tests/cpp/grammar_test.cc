// src/grammar: the token mask against a brute-force oracle on a small vocabulary (a token is allowed
// exactly when prefix + its bytes starts some string of a finite language), the matcher's end, the
// combinators, and the refusal of every JSON Schema keyword the grammar would not enforce, with
// its JSON pointer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/output_processor.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "grammar/grammar.h"

namespace fuselm::grammar {
namespace grammar_test {

// Token 0 is a special (never allowed), the last one the stop id; logits width 40 (> the vocab:
// ids past it are never allowed).
std::vector<std::string> small_vocab() {
  return {"",  "{",  "}",   "\"",  "a",   "b",    "ab",   ":",    ",", " ", "1",   "2",    "12",
          "-", ".",  "[",   "]",   "\"a", "\":", "true", "fal", "se", "n", "ull", "null", "x",
          "e", "0",  "\\",  "\"b\"", "<stop>"};
}
constexpr int32_t kWidth = 40;

Vocabulary vocab() {
  Vocabulary v;
  v.token_bytes = small_vocab();
  v.token_bytes.back() = "";  // the stop token shows no text
  v.size = kWidth;
  v.stop_ids = {static_cast<int32_t>(v.token_bytes.size()) - 1};
  return v;
}

std::set<int32_t> allowed(Matcher& m) {
  std::vector<int32_t> mask(static_cast<size_t>(bitmask_words(m.vocab_size())));
  m.fill_bitmask(mask);
  std::set<int32_t> out;
  for (int32_t i = 0; i < m.vocab_size(); ++i)
    if ((static_cast<uint32_t>(mask[i / 32]) >> (i % 32)) & 1u) out.insert(i);
  return out;
}

/// The oracle: token t is allowed after `prefix` iff some string of `lang` starts with prefix +
/// bytes(t) (a non-empty, non-special token), and the stop id iff prefix is in `lang`.
std::set<int32_t> oracle(const std::vector<std::string>& lang, const std::string& prefix) {
  const auto v = vocab();
  std::set<int32_t> out;
  for (int32_t t = 0; t < static_cast<int32_t>(v.token_bytes.size()); ++t) {
    const std::string& b = v.token_bytes[t];
    if (t == v.stop_ids[0]) {
      for (const auto& s : lang)
        if (s == prefix) out.insert(t);
      continue;
    }
    if (b.empty()) continue;
    for (const auto& s : lang)
      if (s.rfind(prefix + b, 0) == 0) out.insert(t);
  }
  return out;
}

/// Walks random paths through the mask (seeded), comparing it with the oracle at every step.
void check_against_oracle(const Grammar& g, const std::vector<std::string>& lang) {
  Compiler c(vocab());
  auto compiled = c.compile(g);
  std::mt19937 rng(7);
  for (int walk = 0; walk < 30; ++walk) {
    Matcher m(compiled);
    std::string prefix;
    for (int step = 0; step < 20 && !m.terminated(); ++step) {
      auto got = allowed(m);
      ASSERT_EQ(got, oracle(lang, prefix)) << "after '" << prefix << "'";
      ASSERT_FALSE(got.empty());
      std::vector<int32_t> choices(got.begin(), got.end());
      int32_t t = choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(t));
      if (t != vocab().stop_ids[0]) prefix += vocab().token_bytes[t];
    }
    EXPECT_TRUE(m.terminated()) << prefix;
  }
}

TEST(Grammar, EnumSchemaMaskMatchesOracle) {
  check_against_oracle(Grammar::json_schema(nlohmann::json::parse(R"({"enum": ["a", "ab", 12, null, false]})")),
                       {"\"a\"", "\"ab\"", "12", "null", "false"});
}

TEST(Grammar, ObjectSchemaMaskMatchesOracle) {
  // Required "a" (a boolean), optional "b" (1 or 2): compact JSON, ", " and ": " separators.
  auto schema = nlohmann::json::parse(
      R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [1, 2]}},
          "required": ["a"], "additionalProperties": false})");
  check_against_oracle(Grammar::json_schema(schema),
                       {"{\"a\": true}", "{\"a\": false}", "{\"a\": true, \"b\": 1}", "{\"a\": true, \"b\": 2}",
                        "{\"a\": false, \"b\": 1}", "{\"a\": false, \"b\": 2}"});
}

TEST(Grammar, RegexEbnfLiteralAndCombinators) {
  check_against_oracle(Grammar::regex("a(b|1)2?"), {"ab", "a1", "ab2", "a12"});
  std::vector<std::string> items;  // x then 1 to 3 of a|b
  for (const std::string& a : {"a", "b"}) {
    items.push_back("x" + a);
    for (const std::string& b : {"a", "b"}) {
      items.push_back("x" + a + b);
      for (const std::string& c : {"a", "b"}) items.push_back("x" + a + b + c);
    }
  }
  check_against_oracle(Grammar::ebnf("root ::= \"x\" item item? item?\nitem ::= \"a\" | \"b\""), items);
  check_against_oracle(Grammar::literal("\"a\": 12"), {"\"a\": 12"});
  check_against_oracle(Grammar::concat({Grammar::literal("x"), Grammar::regex("[ab]"), Grammar::literal(".")}),
                       {"xa.", "xb."});
  check_against_oracle(Grammar::any_of({Grammar::literal("true"), Grammar::literal("null"), Grammar::regex("-?1")}),
                       {"true", "null", "1", "-1"});
}

TEST(Grammar, LiteralEscapesEveryByte) {
  const std::string text = "a\"\\\n\t]{}:é";
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.size = 257;
  v.stop_ids = {256};
  Compiler c(v);
  Matcher m(c.compile(Grammar::literal(text)));
  for (unsigned char ch : text) {
    auto got = allowed(m);
    ASSERT_EQ(got, std::set<int32_t>{ch});
    ASSERT_TRUE(m.accept(ch));
  }
  EXPECT_TRUE(m.completed());
  EXPECT_EQ(allowed(m), std::set<int32_t>{256});
  EXPECT_FALSE(m.accept('a'));
  EXPECT_TRUE(m.accept(256));
  EXPECT_TRUE(m.terminated());
}

TEST(Grammar, CompilerCachesByKey) {
  Compiler c(vocab());
  auto a = c.compile(Grammar::regex("ab"));
  auto b = c.compile(Grammar::regex("ab"));
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.compile(Grammar::regex("a1")).get());
  EXPECT_NE(Grammar::json_schema(nlohmann::json{{"type", "object"}}, true).key(),
            Grammar::json_schema(nlohmann::json{{"type", "object"}}, false).key());
}

TEST(Grammar, SamplerMaskKeepsRawLogprobs) {
  Compiler c(vocab());
  Matcher m(c.compile(Grammar::regex("ab|1")));
  std::vector<int32_t> mask(static_cast<size_t>(bitmask_words(kWidth)));
  m.fill_bitmask(mask);
  std::vector<float> logits(kWidth, 0.f);
  logits[25] = 5.f;  // "x": the model's favourite, not allowed
  logits[10] = 1.f;  // "1"
  engine::SamplingParams p;
  p.temperature = 0.f;
  engine::Sampler s(p);
  auto out = s.sample(logits, true, mask);
  EXPECT_EQ(out.token, 10);
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  EXPECT_NEAR(out.logprob, 1.0 - std::log(z), 1e-5);  // raw distribution
  // Unconstrained: the favourite.
  EXPECT_EQ(engine::Sampler(p).sample(logits, false).token, 25);
  std::vector<float> masked = logits;
  std::vector<int32_t> scratch;
  Matcher(c.compile(Grammar::regex("ab|1"))).mask_logits(masked, scratch);
  for (int32_t i = 0; i < kWidth; ++i) EXPECT_EQ(std::isinf(masked[i]), i != 4 && i != 6 && i != 10) << i;
}

struct Refused {
  const char* schema;
  const char* keyword;
  const char* pointer;
};

TEST(Grammar, RefusesEveryKeywordItWouldNotEnforce) {
  const Refused cases[] = {
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems", "/uniqueItems"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "contains", "/contains"},
      {R"({"type": "array", "items": {"type": "integer"}, "minContains": 2})", "minContains", "/minContains"},
      {R"({"type": "array", "maxContains": 2})", "maxContains", "/maxContains"},
      {R"({"properties": {"a": {"not": {"type": "string"}}}})", "not", "/properties/a/not"},
      {R"({"if": {"type": "string"}, "then": {"minLength": 2}})", "if", "/if"},
      {R"({"type": "object", "then": {}})", "then", "/then"},
      {R"({"type": "object", "else": {}})", "else", "/else"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "dependentRequired", "/dependentRequired"},
      {R"({"type": "object", "dependentSchemas": {"a": {}}})", "dependentSchemas", "/dependentSchemas"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "patternProperties", "/patternProperties"},
      {R"({"type": "object", "propertyNames": {"maxLength": 3}})", "propertyNames", "/propertyNames"},
      {R"({"$dynamicRef": "#meta"})", "$dynamicRef", "/$dynamicRef"},
      {R"({"$defs": {"x": {"$dynamicAnchor": "meta"}}})", "$dynamicAnchor", "/$defs/x/$dynamicAnchor"},
      {R"({"$anchor": "a"})", "$anchor", "/$anchor"},
      {R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})", "oneOf", "/oneOf"},
      {R"({"oneOf": [{"type": "string"}, {"enum": ["a", 1]}]})", "oneOf", "/oneOf"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "allOf", "/allOf"},
      {R"({"type": "string", "format": "uri-reference"})", "format", "/format"},
      {R"({"type": "string", "format": "date", "pattern": "^2"})", "pattern", "/pattern"},
      {R"({"type": "string", "pattern": "^a", "maxLength": 3})", "maxLength", "/maxLength"},
      {R"({"type": "number", "multipleOf": 0.5})", "multipleOf", "/multipleOf"},
      {R"({"type": "integer", "multipleOf": 3, "minimum": 0})", "multipleOf", "/multipleOf"},
      {R"({"$ref": "#/$defs/a", "maxLength": 2, "$defs": {"a": {"type": "string"}}})", "maxLength", "/maxLength"},
      {R"({"$ref": "http://example.com/s.json"})", "$ref", "/$ref"},
      {R"({"enum": [1, "a"], "type": "string"})", "type", "/type"},
      {R"({"anyOf": [{"type": "string"}], "type": "object", "properties": {}})", "properties", "/properties"},
      {R"({"type": "object", "properties": {"a/b": {"type": "array", "items": {"uniqueItems": true, "type": "array"}}}})",
       "uniqueItems", "/properties/a~1b/items/uniqueItems"},
      {R"({"type": "object", "required": ["a"]})", "required", "/required"},
      {R"({"properties": {"a": {"$id": "x"}}})", "$id", "/properties/a/$id"},
      {R"({"type": "object", "frobnicate": 1})", "frobnicate", "/frobnicate"},
      {R"({"type": "array", "additionalItems": false})", "additionalItems", "/additionalItems"},
      {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": true})", "additionalProperties",
       "/additionalProperties"},
      {R"({"type": "object", "properties": {"a\"b": {}}})", "properties", "/properties"},
  };
  for (const auto& c : cases) {
    try {
      (void)Grammar::json_schema(nlohmann::json::parse(c.schema));
      ADD_FAILURE() << "accepted " << c.schema;
    } catch (const UnsupportedSchemaError& e) {
      EXPECT_EQ(e.keyword(), c.keyword) << c.schema;
      EXPECT_EQ(e.pointer(), c.pointer) << c.schema;
      EXPECT_NE(std::string(e.what()).find(c.keyword), std::string::npos) << e.what();
    }
  }
}

TEST(Grammar, AcceptsAnnotationsAndEnforcedKeywords) {
  const char* schemas[] = {
      R"({"title": "t", "description": "d", "examples": [1], "$comment": "c", "default": 1, "deprecated": false,
          "readOnly": true, "writeOnly": false, "$schema": "https://json-schema.org/draft/2020-12/schema",
          "type": "integer", "minimum": 0, "exclusiveMaximum": 10})",
      R"({"type": "string", "enum": ["a", "b"], "title": "pydantic writes type beside enum"})",
      R"({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}], "default": null})",
      R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "number"}, "minItems": 1,
          "maxItems": 4, "uniqueItems": false})",
      R"({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})",
      R"({"allOf": [{"$ref": "#/definitions/a"}], "definitions": {"a": {"const": 3}}})",
      R"({"type": ["string", "null"], "maxLength": 5})",
      R"({"type": "integer", "multipleOf": 5})",
      R"({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}, {"type": "null"}]})",
      R"({"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer"}})",
      R"(true)",
  };
  for (const char* s : schemas) EXPECT_NO_THROW((void)Grammar::json_schema(nlohmann::json::parse(s))) << s;
}

/// Whether `g` accepts `text` (fed byte by byte, then the stop token).
bool accepts_text(const Grammar& g, const std::string& text) {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.size = 257;
  v.stop_ids = {256};
  Compiler c(v);
  Matcher m(c.compile(g));
  for (unsigned char ch : text)
    if (!m.accept(ch)) return false;
  return m.accept(256) && m.terminated();
}

TEST(Grammar, OpenObjectsAreClosedSoEscapedKeysCannotAlias) {
  // Without strict, JSON Schema allows further properties; xgrammar would let "\u0066oo" (which
  // JSON reads as "foo") through with any value. normalize_schema closes named objects instead.
  const auto schema = nlohmann::json::parse(R"({"properties": {"foo": {"type": "integer"}}})");
  const Grammar g = Grammar::json_schema(schema, /*strict=*/false);
  EXPECT_TRUE(accepts_text(g, R"({"foo": 3})"));
  EXPECT_TRUE(accepts_text(g, R"({})"));
  EXPECT_FALSE(accepts_text(g, R"({"\u0066oo": "x"})"));
  EXPECT_FALSE(accepts_text(g, R"({"bar": "x"})"));
  // unevaluatedProperties with nothing in place beside it is additionalProperties.
  const Grammar u = Grammar::json_schema(
      nlohmann::json::parse(R"({"type": "object", "unevaluatedProperties": {"type": "integer"}})"), false);
  EXPECT_TRUE(accepts_text(u, R"({"x": 1})"));
  EXPECT_FALSE(accepts_text(u, R"({"x": "1"})"));
  // An object with no named properties stays open (response_format json_object).
  EXPECT_TRUE(accepts_text(Grammar::any_json_object(), R"({"a": [1, {"b": null}], "c": "d"})"));
}

/// The engine hook: a constrained sequence through OutputProcessor samples only what its grammar
/// allows (greedy over a row that prefers a disallowed token), ends with stop once the grammar
/// takes the stop id, and reports the raw logprob; a sequence without a grammar is untouched.
TEST(Grammar, OutputProcessorFollowsTheGrammar) {
  Compiler c(vocab());
  const int32_t stop = vocab().stop_ids[0];
  engine::OutputProcessor out(nullptr, {stop}, 1000);
  auto make = [&](std::shared_ptr<const CompiledGrammar> g) {
    engine::Request r;
    r.prompt_ids = {1, 2};
    r.max_tokens = 10;
    r.logprobs = true;
    r.grammar = std::move(g);
    auto s = std::make_unique<engine::Sequence>(std::move(r));
    s->tokens = s->req.prompt_ids;
    s->num_prompt = 2;
    out.attach(*s);
    return s;
  };
  std::vector<float> row(kWidth, 0.f);
  row[25] = 9.f;  // "x", never allowed
  row[4] = 2.f;   // "a"
  row[10] = 1.f;  // "1"
  auto s = make(c.compile(Grammar::regex("a1")));
  auto t1 = out.on_row(*s, row);
  EXPECT_EQ(t1.event.tokens.at(0).id, 4);
  EXPECT_FALSE(t1.finish.has_value());
  double z = 0;
  for (float l : row) z += std::exp(static_cast<double>(l));
  EXPECT_NEAR(t1.event.tokens[0].logprob, 2.0 - std::log(z), 1e-5);
  EXPECT_EQ(out.on_row(*s, row).event.tokens.at(0).id, 10);
  auto t3 = out.on_row(*s, row);  // only the stop id is left
  EXPECT_EQ(t3.event.tokens.at(0).id, stop);
  EXPECT_EQ(t3.finish, engine::FinishReason::stop);
  EXPECT_TRUE(s->matcher->terminated());
  // Ignoring EOS does not go past a grammar that has ended.
  auto ig = make(c.compile(Grammar::literal("a")));
  ig->req.ignore_eos = true;
  out.on_row(*ig, row);
  EXPECT_EQ(out.on_row(*ig, row).finish, engine::FinishReason::stop);
  // Unconstrained: the model's favourite.
  auto free = make(nullptr);
  EXPECT_EQ(out.on_row(*free, row).event.tokens.at(0).id, 25);
  EXPECT_FALSE(free->matcher.has_value());
  // A logits row of another width than the grammar's vocabulary is an error, not a crash.
  auto wrong = make(c.compile(Grammar::regex("a")));
  std::vector<float> narrow(8, 0.f);
  auto e = out.on_row(*wrong, narrow);
  EXPECT_EQ(e.finish, engine::FinishReason::error);
  EXPECT_FALSE(e.error.empty());
}

TEST(Grammar, KeywordsWithoutATypeAssertOnlyOnTheirType) {
  // {"minimum": 3} says nothing about strings or null: it is rewritten as anyOf a bounded number
  // and the other types (xgrammar alone would drop the bound).
  const Grammar g = Grammar::json_schema(nlohmann::json::parse(R"({"minimum": 3, "maxLength": 2, "title": "t"})"), false);
  for (const char* ok : {"3", "4.5", "\"ab\"", "null", "true", "[1]", "{}"}) EXPECT_TRUE(accepts_text(g, ok)) << ok;
  for (const char* bad : {"2", "-1", "2.5", "\"abc\""}) EXPECT_FALSE(accepts_text(g, bad)) << bad;
  const Grammar a = Grammar::json_schema(nlohmann::json::parse(R"({"maxItems": 1, "minProperties": 1})"), false);
  for (const char* ok : {"[]", "[2]", "{\"a\": 1}", "7", "\"s\""}) EXPECT_TRUE(accepts_text(a, ok)) << ok;
  for (const char* bad : {"[1, 2]", "{}"}) EXPECT_FALSE(accepts_text(a, bad)) << bad;
}

TEST(Grammar, BadInputIsAGrammarError) {
  EXPECT_THROW((void)Grammar::regex("a(b"), GrammarError);
  EXPECT_THROW((void)Grammar::ebnf("root ::= undefined_rule"), GrammarError);
  EXPECT_THROW((void)Grammar::json_schema(nlohmann::json::parse(R"({"type": "strin"})")), GrammarError);
  EXPECT_THROW((void)Grammar::json_schema(nlohmann::json::parse(R"({"$ref": "#/$defs/missing"})")), GrammarError);
  EXPECT_THROW((void)Grammar::json_schema(nlohmann::json::parse("3")), GrammarError);
  EXPECT_THROW((void)Grammar::concat({}), GrammarError);
  Compiler c(vocab());
  EXPECT_THROW((void)c.compile(Grammar::json_schema(nlohmann::json::parse(R"({"$ref": "#"})"))), GrammarError);
  EXPECT_THROW((void)c.compile(Grammar::regex("q")), GrammarError);  // no token of the vocabulary writes q
  try {
    (void)Grammar::ebnf("root ::= (");
  } catch (const GrammarError& e) {
    EXPECT_EQ(std::string(e.what()).find(".cc"), std::string::npos) << e.what();  // no source paths
  }
}

}  // namespace grammar_test
}  // namespace fuselm::grammar
