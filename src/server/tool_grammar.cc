#include "server/tool_grammar.h"

#include <fmt/core.h>

#include <vector>

#include "server/api_error.h"
#include "template/json_scan.h"

namespace fuselm::server {
namespace {

using tmpl::ToolFormat;

void add_literal(std::vector<grammar::Grammar>& parts, const std::string& text) {
  if (!text.empty()) parts.push_back(grammar::Grammar::literal(text));
}

/// The arguments of tools[i] as a grammar: its parameters schema (ordered as the client wrote it).
grammar::Grammar arguments_grammar(const nlohmann::json& fn, size_t i) {
  const bool strict = fn.value("strict", false) == true;
  if (!fn.contains("parameters") || fn["parameters"].is_null()) return grammar::Grammar::any_json_object();
  try {
    return grammar::Grammar::json_schema(nlohmann::ordered_json::parse(fn["parameters"].dump()), strict);
  } catch (const grammar::UnsupportedSchemaError& e) {
    throw ApiError(400, fmt::format("tools[{}].function.parameters uses '{}' at '{}', which constrained tool calls cannot enforce: {}",
                                    i, e.keyword(), e.pointer(), e.what()), "tools");
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("tools[{}].function.parameters: {}", i, e.what()), "tools");
  }
}

/// Nine alphanumerics for templates that write the call id between the name and the arguments.
constexpr const char* kForcedId = "call00001";

/// One argument's value as name_then_params writes it: a string as raw text up to the close
/// marker (which it cannot hold the first character of), anything else as JSON under its schema.
grammar::Grammar param_value_grammar(const ToolFormat& f, const nlohmann::json& schema, size_t i) {
  if (schema.is_object() && schema.value("type", nlohmann::json()) == "string") {
    for (const auto& [k, v] : schema.items())
      if (k != "type" && k != "description" && k != "title" && k != "enum" &&
          !((k == "minLength" || k == "maxLength") && v.is_number_unsigned()))
        throw ApiError(400, fmt::format("tools[{}].function.parameters: a string parameter with '{}' cannot be forced in this "
                                        "template's parameter format (only type, enum, minLength, maxLength, description)", i, k), "tools");
    if (schema.contains("enum")) {
      std::vector<grammar::Grammar> alts;
      for (const auto& e : schema["enum"])
        if (e.is_string()) alts.push_back(grammar::Grammar::literal(e.get<std::string>()));
      if (alts.empty()) throw ApiError(400, fmt::format("tools[{}].function.parameters: a string enum without strings", i), "tools");
      return alts.size() == 1 ? alts[0] : grammar::Grammar::any_of(alts);
    }
    const std::string_view close = tmpl::trim(f.param_close);
    const char stop = close.empty() ? '\n' : close.front();
    const std::string cls = std::string("\\^]-[").find(stop) != std::string::npos ? std::string("\\") + stop : std::string(1, stop);
    const uint64_t lo = std::max<uint64_t>(1, schema.value("minLength", uint64_t{1}));
    const std::string count = schema.contains("maxLength") ? fmt::format("{{{},{}}}", lo, schema["maxLength"].get<uint64_t>())
                                                           : fmt::format("{{{},}}", lo);
    return grammar::Grammar::regex("[^" + cls + "\\n]" + count);
  }
  nlohmann::json fn = {{"parameters", schema}, {"strict", true}};
  return arguments_grammar(fn, i);
}

/// name_then_params arguments: each required property of the schema, in its order.
void add_params(std::vector<grammar::Grammar>& parts, const ToolFormat& f, const nlohmann::json& fn, size_t i) {
  const auto params = fn.value("parameters", nlohmann::json::object());
  if (!params.is_object() || !params.contains("required")) return;
  const auto props = params.value("properties", nlohmann::json::object());
  bool first = true;
  for (const auto& key : params["required"]) {
    if (!key.is_string() || !props.contains(key.get<std::string>()))
      throw ApiError(400, fmt::format("tools[{}].function.parameters.required names '{}', which has no schema in properties", i,
                                      key.dump()), "tools");
    add_literal(parts, (first ? "" : f.param_sep) + f.param_open + key.get<std::string>() + f.param_mid);
    parts.push_back(param_value_grammar(f, props[key.get<std::string>()], i));
    add_literal(parts, f.param_close);
    first = false;
  }
}

grammar::Grammar one_call(const ToolFormat& f, const nlohmann::json& fn, size_t i) {
  const std::string name = fn["name"];
  std::vector<grammar::Grammar> parts;
  add_literal(parts, f.block_open + f.call_open);
  if (f.kind == ToolFormat::Kind::json_object) {
    add_literal(parts, "{" + nlohmann::json(f.name_key).dump() + ": " + nlohmann::json(name).dump() + ", " +
                           nlohmann::json(f.args_key).dump() + ": ");
    if (f.args_as_string) throw ApiError(400, "tool_choice: this template writes arguments as a JSON string, which a forced call cannot write yet", "tool_choice");
    parts.push_back(arguments_grammar(fn, i));
    add_literal(parts, "}");
  } else if (f.kind == ToolFormat::Kind::name_then_args) {
    add_literal(parts, name + (f.has_id ? f.id_before + kForcedId + f.id_after : f.mid));
    parts.push_back(arguments_grammar(fn, i));
  } else {
    add_literal(parts, name + f.mid);
    add_params(parts, f, fn, i);
  }
  add_literal(parts, f.call_close + f.block_close);
  return grammar::Grammar::concat(parts);
}

}  // namespace

grammar::Grammar tool_call_grammar(const ToolFormat& f, const nlohmann::json& tools, const std::string& name) {
  std::vector<grammar::Grammar> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    if (name.empty() || fn["name"] == name) calls.push_back(one_call(f, fn, i));
  }
  if (calls.empty()) throw ApiError(400, "'tool_choice' names no function of 'tools'", "tool_choice");
  return calls.size() == 1 ? calls[0] : grammar::Grammar::any_of(calls);
}

}  // namespace fuselm::server
