#pragma once
// What a chat request adds around the template: the template's tool/reasoning formats (found once
// by rendering, tool_format.h), the checks on messages, tools and tool_choice, and the per-choice
// output that splits the generated text into reasoning_content, content and tool_calls.
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "grammar/grammar.h"
#include "server/chat_output_parser.h"
#include "server/generation.h"
#include "template/tool_format.h"

namespace fuselm::server {

/// The server's render function (ServerConfig::render_chat).
using ChatRenderFn = std::function<std::string(const nlohmann::ordered_json& body, bool add_generation_prompt)>;

/// A template's formats, found once per server.
struct ChatFormats {
  tmpl::ToolFormat tools;
  tmpl::ThinkingFormat thinking;
  /// The template renders a `developer` message otherwise than a message of an unknown role
  /// (else `developer` is rendered as `system`).
  bool developer_role = false;
};

/// Discovers the formats with `render` (never throws).
ChatFormats discover_chat_formats(const ChatRenderFn& render);

/// How the reply of one chat request is read.
struct ChatPlan {
  bool parse_tools = false;  ///< tools given, tool_choice not "none"
  nlohmann::json tools;      ///< the request's tools (parameter types for name_then_params values)
  bool in_reasoning = false; ///< the rendered prompt leaves a reasoning block open
  /// tool_choice "required" ("") or a named function (its name): the reply is made one call by
  /// forced_call_grammar.
  std::optional<std::string> forced;
};

/// Checks and rewrites an ordered chat body before rendering: roles (an unknown one is a 400
/// naming it; `developer` becomes `system` where the template has no developer role), content
/// parts joined, assistant tool_calls (content null becomes "", arguments given as a JSON string
/// become the object, as vLLM passes them to templates), tools and tool_choice (a template whose
/// tool format could not be derived makes `tools` a 400; tool_choice "none" drops the tools),
/// chat_template_kwargs (an object) and enable_thinking (a boolean). Throws ApiError 400 naming
/// the field. Returns the plan for reading the reply (in_reasoning is set by the caller).
ChatPlan prepare_chat_body(nlohmann::ordered_json& body, const ChatFormats& formats);

/// The grammar of a forced call (plan.forced set): the reasoning block's close first when the
/// prompt leaves one open, then the call (tool_grammar.h). Throws ApiError 400.
grammar::Grammar forced_call_grammar(const ChatPlan& plan, const ChatFormats& formats);

/// The per-choice output of a chat reply read with `plan`.
std::unique_ptr<ChoiceOutput> make_chat_output(const ChatPlan& plan, const ChatFormats& formats);

}  // namespace fuselm::server
