#include "server/structured_output.h"

#include <fmt/core.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "base/json_limited.h"
#include "server/api_error.h"

namespace fuselm::server {
namespace {

// In the request's key order: a schema's properties are generated in the order it lists them.
using ojson = nlohmann::ordered_json;

constexpr const char* kFields[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                   "guided_grammar", "guided_choice", "grammar", "json_schema"};

const ojson* present(const ojson& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

/// Runs a Grammar factory, turning its errors into a 400 naming `field` (and, for a schema keyword
/// the grammar cannot enforce, the keyword and its JSON pointer in the message).
template <typename F>
grammar::Grammar build(const std::string& field, F&& f) {
  try {
    return f();
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("'{}': {}", field, e.what()), field);
  }
}

std::string need_string(const ojson& v, const std::string& field) {
  if (!v.is_string()) throw ApiError(400, fmt::format("'{}' must be a string", field), field);
  return v.get<std::string>();
}

/// A JSON Schema given as an object (or a boolean), or as JSON text (vLLM accepts both).
ojson schema_value(const ojson& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    try {
      ojson parsed = base::parse_json_limited_as<ojson>(v.get<std::string>());
      if (parsed.is_object() || parsed.is_boolean()) return parsed;
    } catch (const std::exception&) {  // not JSON, or nested too deep
    }
  }
  throw ApiError(400, fmt::format("'{}' must be a JSON Schema (an object, or its JSON text)", field), field);
}

grammar::Grammar schema_grammar(const ojson& v, const std::string& field, bool strict) {
  ojson schema = schema_value(v, field);
  return build(field, [&] { return grammar::Grammar::json_schema(schema, strict); });
}

grammar::Grammar choice_grammar(const ojson& v, const std::string& field) {
  if (!v.is_array() || v.empty()) throw ApiError(400, fmt::format("'{}' must be a non-empty array of strings", field), field);
  std::vector<grammar::Grammar> alternatives;
  for (const auto& c : v) alternatives.push_back(grammar::Grammar::literal(need_string(c, field)));
  return build(field, [&] { return grammar::Grammar::any_of(alternatives); });
}

std::optional<StructuredOutput> response_format(const ojson& rf) {
  const std::string f = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw ApiError(400, "'response_format' must be an object with a string 'type'", f);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return StructuredOutput{grammar::Grammar::any_json_object(), f};
  if (type != "json_schema")
    throw ApiError(400, fmt::format("'response_format' type '{}' is not supported (text, json_object, json_schema)", type), f);
  const ojson* js = present(rf, "json_schema");
  if (!js || !js->is_object()) throw ApiError(400, "'response_format.json_schema' must be an object", f + ".json_schema");
  if (const ojson* name = present(*js, "name"); !name || !name->is_string())
    throw ApiError(400, "'response_format.json_schema.name' must be a string (it is required)", f + ".json_schema.name");
  bool strict = false;
  if (const ojson* s = present(*js, "strict")) {
    if (!s->is_boolean()) throw ApiError(400, "'response_format.json_schema.strict' must be a boolean", f + ".json_schema.strict");
    strict = s->get<bool>();
  }
  const ojson* schema = present(*js, "schema");
  const std::string sf = f + ".json_schema.schema";
  // OpenAI's schema is optional: without one, any JSON object.
  if (!schema) return StructuredOutput{grammar::Grammar::any_json_object(), f};
  return StructuredOutput{schema_grammar(*schema, sf, strict), sf};
}

/// vLLM's structured_outputs object: exactly one of json, regex, grammar, choice, json_object.
std::optional<StructuredOutput> structured_outputs(const ojson& so) {
  const std::string f = "structured_outputs";
  if (!so.is_object()) throw ApiError(400, "'structured_outputs' must be an object", f);
  bool strict = false;  // vLLM's default: JSON Schema's (further properties allowed)
  std::optional<StructuredOutput> out;
  for (const auto& [key, v] : so.items()) {
    const std::string kf = f + "." + key;
    if (v.is_null() || key == "disable_fallback" || key == "disable_any_whitespace") continue;  // change nothing here
    if (key == "disable_additional_properties") {
      if (!v.is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", kf), kf);
      strict = v.get<bool>();
      continue;
    }
    std::optional<StructuredOutput> g;
    if (key == "json") g = StructuredOutput{grammar::Grammar::literal(""), kf};  // built below, once strict is known
    else if (key == "regex") g = StructuredOutput{build(kf, [&, &val = v] { return grammar::Grammar::regex(need_string(val, kf)); }), kf};
    else if (key == "grammar") g = StructuredOutput{build(kf, [&, &val = v] { return grammar::Grammar::ebnf(need_string(val, kf)); }), kf};
    else if (key == "choice") g = StructuredOutput{choice_grammar(v, kf), kf};
    else if (key == "json_object" && v == ojson(true)) g = StructuredOutput{grammar::Grammar::any_json_object(), kf};
    else if (key == "json_object" && v == ojson(false)) continue;
    else throw ApiError(400, fmt::format("'{}' is not supported", kf), kf);
    if (out) throw ApiError(400, fmt::format("'{}' and '{}' cannot both be given", out->field, kf), kf);
    out = std::move(g);
  }
  if (out && out->field == f + ".json") out->grammar = schema_grammar(so["json"], out->field, strict);
  if (!out) throw ApiError(400, "'structured_outputs' names no constraint (ojson, regex, grammar, choice, json_object)", f);
  return out;
}

/// The one field of `body` at `name` as a grammar (none when the field is absent).
std::optional<StructuredOutput> one_field(const ojson& body, const std::string& name) {
  const ojson* v = present(body, name.c_str());
  if (!v) return std::nullopt;
  if (name == "response_format") return response_format(*v);
  if (name == "structured_outputs") return structured_outputs(*v);
  if (name == "guided_json" || name == "json_schema") return StructuredOutput{schema_grammar(*v, name, false), name};
  if (name == "guided_regex") return StructuredOutput{build(name, [&] { return grammar::Grammar::regex(need_string(*v, name)); }), name};
  if (name == "guided_grammar" || name == "grammar")
    return StructuredOutput{build(name, [&] { return grammar::Grammar::ebnf(need_string(*v, name)); }), name};
  return StructuredOutput{choice_grammar(*v, name), name};  // guided_choice
}

}  // namespace

std::optional<StructuredOutput> read_structured_output(const nlohmann::json& unordered, std::string_view raw_body) {
  // Fields that would change the output and that fuselm does not implement: refused, not ignored.
  for (const char* f : {"guided_whitespace_pattern", "structural_tag"}) {
    if (unordered.contains(f) && !unordered[f].is_null()) throw ApiError(400, fmt::format("'{}' is not supported", f), f);
  }
  if (std::none_of(std::begin(kFields), std::end(kFields), [&](const char* f) { return unordered.contains(f); }))
    return std::nullopt;
  // The body again in its own key order (it parsed once already, so it parses again).
  const ojson body = raw_body.empty() ? ojson::parse(unordered.dump()) : ojson::parse(raw_body);
  std::optional<StructuredOutput> out;
  std::string first;
  for (const char* name : kFields) {
    std::optional<StructuredOutput> g;
    try {
      g = one_field(body, name);
    } catch (const ApiError& e) {  // the message names the inner field; param is the body's field
      throw ApiError(e.status, e.what(), name);
    }
    if (!g) continue;
    if (!first.empty()) throw ApiError(400, fmt::format("'{}' and '{}' cannot both constrain the output", first, name), name);
    first = name;
    out = std::move(g);
  }
  return out;
}

std::shared_ptr<grammar::Compiler> make_grammar_compiler(const tokenizer::Tokenizer& tok, int64_t logits_width,
                                                         const std::vector<int64_t>& eos_ids) {
  grammar::Vocabulary v;
  // Tokenizer ids past the logits (added tokens beyond the embedding) can never be sampled.
  const auto n = static_cast<uint32_t>(std::min<int64_t>(tok.vocab_size(), logits_width));
  v.token_bytes.reserve(n);
  for (uint32_t id = 0; id < n; ++id) v.token_bytes.push_back(tok.token_bytes(id));
  v.size = static_cast<int32_t>(logits_width);
  for (int64_t id : eos_ids)
    if (id >= 0 && id < logits_width) v.stop_ids.push_back(static_cast<int32_t>(id));
  return std::make_shared<grammar::Compiler>(v);
}

std::shared_ptr<const grammar::CompiledGrammar> compile_structured_output(const StructuredOutput& so,
                                                                           grammar::Compiler* compiler) {
  const std::string param = so.field.substr(0, so.field.find('.'));
  if (!compiler) throw ApiError(400, fmt::format("'{}' needs the model's tokenizer.json", so.field), param);
  try {
    return compiler->compile(so.grammar);
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("'{}': {}", so.field, e.what()), param);
  }
}

}  // namespace fuselm::server
