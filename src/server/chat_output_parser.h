#pragma once
// Splits a chat model's generated text into reasoning, content and tool calls, by the markers
// that tmpl::discover_tool_format / discover_thinking_format found in the model's chat template.
// Incremental: feed() takes the text as it is generated and returns what can be told apart so
// far (a marker cut across two pieces is held back until it is whole), so streamed deltas and the
// non-streamed message come from the same parse. Markers are matched with the whitespace around
// them ignored (models vary in it).
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "template/tool_format.h"

namespace fuselm::server {

namespace detail {
struct Match;  // chat_output_parser.cc: matched (end), needs more text, or no match
}  // namespace detail

/// One parsed call; `arguments` is the JSON text of the arguments object (OpenAI's form).
struct ParsedToolCall {
  std::string id, name, arguments;
};

/// What one feed() (or finish()) adds. `calls` holds the calls completed in it, with `index`
/// counting calls over the whole reply.
struct OutputDelta {
  std::string reasoning, content;
  std::vector<std::pair<int, ParsedToolCall>> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

/// Whether the generated text starts inside a reasoning block: the rendered prompt ends with the
/// open marker (or the template's generation prompt opens one and this prompt does not close it).
bool starts_in_reasoning(std::string_view prompt, const tmpl::ThinkingFormat& think);

class ChatOutputParser {
 public:
  /// `tools`: the format to parse calls with, or nullptr for no call parsing (no tools, or
  /// tool_choice none). `tool_defs`: the request's tools (string-typed parameters keep their text
  /// as is; other values of name_then_params are read as JSON where they parse). `think`: the
  /// reasoning markers (close empty: no reasoning split).
  ChatOutputParser(const tmpl::ToolFormat* tools, nlohmann::json tool_defs, tmpl::ThinkingFormat think,
                   bool in_reasoning);

  /// Adds generated text; returns the reasoning/content/calls it settles.
  OutputDelta feed(std::string_view text);
  /// The end of generation: everything held back is settled (an unfinished call becomes content).
  OutputDelta finish();

  /// Totals over the whole reply.
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& calls() const { return calls_; }

 private:
  enum class State { reasoning, content, calls, tail };
  bool step(OutputDelta& out, bool final);
  bool step_reasoning(OutputDelta& out, bool final);
  bool step_content(OutputDelta& out, bool final);
  bool step_calls(OutputDelta& out, bool final);
  void emit_content(OutputDelta& out, std::string_view s);
  void emit_reasoning(OutputDelta& out, std::string_view s);
  /// A call's body from `at` (after its opening text): need more text, fail, or its end.
  detail::Match parse_call(std::string_view s, size_t at, bool final, ParsedToolCall& call) const;
  detail::Match parse_params(std::string_view s, size_t at, bool final, ParsedToolCall& call) const;
  std::string param_value(const std::string& fn, const std::string& key, std::string_view text) const;

  const tmpl::ToolFormat* tools_;
  nlohmann::json tool_defs_;
  tmpl::ThinkingFormat think_;
  State state_;
  std::string buf_;
  bool content_started_ = false;  // any non-space content (or a call) came out
  bool in_block_ = false;         // calls: the block's open text was read
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
};

}  // namespace fuselm::server
