#include "grammar/grammar.h"

#include <cctype>
#include <cstdio>

#include "grammar/grammar_impl.h"
#include "grammar/schema_check.h"

namespace fuselm::grammar {
namespace {

Grammar::Impl make(xgrammar::Grammar g, std::string key) { return Grammar::Impl{std::move(g), std::move(key)}; }

/// `text` as an EBNF string literal: ASCII punctuation and control bytes escaped as \u00HH (fixed
/// width: xgrammar's \x takes every hex digit that follows), UTF-8 multi-byte sequences kept as
/// they are (the parser reads them as code points).
std::string ebnf_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c >= 0x80 || (std::isalnum(c) != 0) || c == ' ') {
      out += static_cast<char>(c);
    } else {
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    }
  }
  return out + "\"";
}

std::vector<xgrammar::Grammar> unwrap(const std::vector<Grammar>& gs, const char* what) {
  if (gs.empty()) throw GrammarError(std::string(what) + " needs at least one grammar");
  std::vector<xgrammar::Grammar> out;
  for (const auto& g : gs) out.push_back(g.impl().g);
  return out;
}

std::string join_keys(const std::vector<Grammar>& gs) {
  std::string k;
  for (const auto& g : gs) k += std::to_string(g.key().size()) + ":" + g.key();
  return k;
}

}  // namespace

UnsupportedSchemaError::UnsupportedSchemaError(std::string keyword, std::string pointer, const std::string& why)
    : GrammarError("unsupported JSON Schema keyword '" + keyword + "' at '" + pointer + "': " + why),
      keyword_(std::move(keyword)),
      pointer_(std::move(pointer)) {}

Grammar Grammar::json_schema(const nlohmann::json& schema, bool strict) {
  return json_schema(nlohmann::ordered_json::parse(schema.dump()), strict);
}

Grammar Grammar::json_schema(const nlohmann::ordered_json& given, bool strict) {
  nlohmann::ordered_json schema = given;
  normalize_schema(schema);
  std::string text = schema.dump();
  check_schema(nlohmann::json::parse(text), strict);
  auto g = guarded("invalid JSON Schema", [&] {
    return xgrammar::Grammar::FromJSONSchema(text, /*any_whitespace=*/false, std::nullopt, std::nullopt, strict);
  });
  return Grammar(std::make_shared<Impl>(make(std::move(g), std::string(strict ? "S" : "s") + text)));
}

Grammar Grammar::any_json_object() {
  return json_schema(nlohmann::ordered_json{{"type", "object"}}, /*strict=*/false);
}

Grammar Grammar::regex(const std::string& pattern) {
  auto g = guarded("invalid regular expression", [&] { return xgrammar::Grammar::FromRegex(pattern); });
  return Grammar(std::make_shared<Impl>(make(std::move(g), "r" + pattern)));
}

Grammar Grammar::ebnf(const std::string& text, const std::string& root) {
  auto g = guarded("invalid grammar", [&] { return xgrammar::Grammar::FromEBNF(text, root); });
  return Grammar(std::make_shared<Impl>(make(std::move(g), "e" + std::to_string(root.size()) + ":" + root + text)));
}

Grammar Grammar::literal(const std::string& text) {
  auto g = guarded("invalid literal", [&] { return xgrammar::Grammar::FromEBNF("root ::= " + ebnf_quote(text)); });
  return Grammar(std::make_shared<Impl>(make(std::move(g), "l" + text)));
}

Grammar Grammar::concat(const std::vector<Grammar>& parts) {
  auto xs = unwrap(parts, "concat");
  auto g = guarded("invalid grammar", [&] { return xgrammar::Grammar::Concat(xs); });
  return Grammar(std::make_shared<Impl>(make(std::move(g), "c(" + join_keys(parts) + ")")));
}

Grammar Grammar::any_of(const std::vector<Grammar>& alternatives) {
  auto xs = unwrap(alternatives, "any_of");
  auto g = guarded("invalid grammar", [&] { return xgrammar::Grammar::Union(xs); });
  return Grammar(std::make_shared<Impl>(make(std::move(g), "u(" + join_keys(alternatives) + ")")));
}

const std::string& Grammar::key() const { return impl_->key; }

std::string Grammar::to_ebnf() const { return impl_->g.ToString(); }

}  // namespace fuselm::grammar
