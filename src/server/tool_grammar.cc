#include "server/tool_grammar.h"

#include <fmt/core.h>

#include <vector>

#include "server/api_error.h"

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
  } else {
    add_literal(parts, name + (f.has_id ? f.id_before + kForcedId + f.id_after : f.mid));
    parts.push_back(arguments_grammar(fn, i));
  }
  add_literal(parts, f.call_close + f.block_close);
  return grammar::Grammar::concat(parts);
}

}  // namespace

grammar::Grammar tool_call_grammar(const ToolFormat& f, const nlohmann::json& tools, const std::string& name) {
  if (f.kind == ToolFormat::Kind::name_then_params)
    throw ApiError(400, "tool_choice \"required\" or a named function is not supported for this chat template: it writes "
                        "arguments as parameters, for which fuselm builds no grammar yet; use \"auto\"", "tool_choice");
  std::vector<grammar::Grammar> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    if (name.empty() || fn["name"] == name) calls.push_back(one_call(f, fn, i));
  }
  if (calls.empty()) throw ApiError(400, "'tool_choice' names no function of 'tools'", "tool_choice");
  return calls.size() == 1 ? calls[0] : grammar::Grammar::any_of(calls);
}

}  // namespace fuselm::server
