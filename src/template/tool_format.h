#pragma once
// The tool-call and reasoning format of a chat template, found by rendering the template with
// probe conversations and diffing the renders (no list of model families or templates).
//
// The rule (docs/templates.md, "Tool calls and reasoning"): render the prompt with and without
// tools (a template that renders both alike cannot express tools); render an assistant turn
// holding one call and one holding two calls, with distinctive probe names and values, and cut
// each render to the assistant's part (the common prefix and suffix with a plain-text assistant
// turn). In that part, the calls are located by their probe names and arguments, and the text
// around them is split into the block's open/close text, each call's open/close text and the
// separator between calls (the text before the first call and between the two calls share the
// call's open text as a suffix; the text between and after share its close text as a prefix).
// How a call writes its name and arguments is one of three structures:
//   json_object:   the call is a JSON object with the name under one key, the arguments under another
//   name_then_args: the name as text, then a JSON object of the arguments (the call id may sit between)
//   name_then_params: the name as text, then each argument as open KEY mid VALUE close text
// Reasoning: an assistant turn with reasoning_content (or thinking) is rendered against one
// without; the text around the probe reasoning gives the open and close markers.
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace fuselm::tmpl {

/// How one template writes tool calls. Marker strings are as rendered (whitespace included);
/// the output parser matches them with surrounding whitespace trimmed.
struct ToolFormat {
  enum class Kind { json_object, name_then_args, name_then_params };
  bool supported = false;
  std::string why;  ///< when !supported: why the format could not be derived (for the 400 message)
  Kind kind = Kind::json_object;
  std::string block_open, block_close;  ///< around all the calls of a turn ("" when none)
  std::string call_open, call_close;    ///< around each call (name kinds: up to the name / after the arguments)
  std::string separator;                ///< between two calls
  bool parallel = true;                 ///< false when the template refuses two calls in one turn
  // json_object
  std::string name_key, args_key;  ///< e.g. "name" and "arguments" (or "parameters")
  bool args_as_string = false;     ///< the arguments are a JSON string holding the object
  // name_then_args / name_then_params: the text between the name and the arguments; when the
  // call id is written there, mid = id_before + ID + id_after (has_id).
  std::string mid;
  bool has_id = false;
  std::string id_before, id_after;
  // name_then_params: each argument is param_open KEY param_mid VALUE param_close, separated by
  // param_sep.
  std::string param_open, param_mid, param_close, param_sep;
};

/// The template's reasoning markers; empty close when it renders no reasoning.
struct ThinkingFormat {
  std::string open, close;
  /// The generation prompt already holds the open marker (so the output starts in reasoning).
  bool prompt_opens = false;
  /// The message key the template reads the reasoning from ("reasoning_content" or "thinking").
  std::string message_key;
};

/// Renders the template with variables {messages, tools (optional), add_generation_prompt};
/// throws on a template error.
using ProbeRenderer = std::function<std::string(const nlohmann::ordered_json& variables)>;

/// Finds the tool-call format by rendering probes with `render`. Never throws: a template that
/// fails on the probes gives supported = false with the reason.
ToolFormat discover_tool_format(const ProbeRenderer& render);

/// Finds the reasoning markers by rendering probes with `render`. Never throws.
ThinkingFormat discover_thinking_format(const ProbeRenderer& render);

/// One line describing the format (for logs and tests), e.g.
/// "json_object name=name args=arguments call=<tool_call>\n|\n</tool_call> sep=\n".
std::string describe(const ToolFormat& f);

}  // namespace fuselm::tmpl
