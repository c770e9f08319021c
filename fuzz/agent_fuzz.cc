// libFuzzer target: what an agent's request and a model's reply go through on the way in and out
// of the chat path, with no engine: the field policy of every endpoint, the Responses body's
// translation to a chat body, the Responses event stream fed raw chat-stream bytes, and the chat
// output parser (reasoning / content / tool calls) fed the input as generated text, in pieces,
// for each kind of discovered tool-call format. Bad input must end in ApiError 400; a crash, a
// sanitizer report or another exception is a finding, as is a parse that depends on how the text
// was cut into pieces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "request_body.h"
#include "server/chat_output_parser.h"
#include "server/field_policy.h"
#include "server/responses_api.h"

namespace {

using fuselm::tmpl::ToolFormat;

// Three formats as discovery finds them in real templates (tests/cpp has their derivations).
ToolFormat format(int kind) {
  ToolFormat f;
  f.supported = true;
  if (kind == 0) {  // a JSON object per call between tags (Hermes / Qwen style)
    f.kind = ToolFormat::Kind::json_object;
    f.call_open = "<tool_call>\n", f.call_close = "\n</tool_call>", f.separator = "\n";
    f.name_key = "name", f.args_key = "arguments";
  } else if (kind == 1) {  // the name, then the JSON arguments
    f.kind = ToolFormat::Kind::name_then_args;
    f.block_open = "[TOOL_CALLS]", f.mid = "[ARGS]";
  } else {  // the name, then each parameter between tags
    f.kind = ToolFormat::Kind::name_then_params;
    f.call_open = "<tool_call>\n<function=", f.mid = ">\n", f.call_close = "</function>\n</tool_call>";
    f.param_open = "<parameter=", f.param_mid = ">\n", f.param_close = "\n</parameter>\n";
  }
  return f;
}

void parse_reply(std::string_view text, size_t cut) {
  const fuselm::tmpl::ThinkingFormat think{"<think>", "</think>", false, "reasoning_content"};
  const nlohmann::json defs = nlohmann::json::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"integer"}}}}}])");
  for (int kind = 0; kind < 3; ++kind) {
    const ToolFormat f = format(kind);
    fuselm::server::ChatOutputParser whole(&f, defs, think, false), pieces(&f, defs, think, false);
    whole.feed(text), whole.finish();
    for (size_t at = 0; at < text.size(); at += cut) pieces.feed(text.substr(at, cut));
    pieces.finish();
    if (whole.content() != pieces.content() || whole.reasoning() != pieces.reasoning() ||
        whole.calls().size() != pieces.calls().size())
      __builtin_trap();
  }
}

void translate_request(const std::string& raw) {
  nlohmann::json body;
  nlohmann::ordered_json ordered;
  if (!fuselm::fuzz::parse_body(raw, body, ordered)) return;
  static fuselm::server::UnknownFieldLog log([](const std::string&) {});
  using fuselm::server::Endpoint;
  for (Endpoint ep : {Endpoint::completions, Endpoint::chat, Endpoint::responses, Endpoint::embeddings})
    fuselm::fuzz::ok_or_400([&] { fuselm::server::check_fields(body, ep, log); });
  fuselm::fuzz::ok_or_400([&] { (void)fuselm::server::responses_to_chat(ordered); });
  fuselm::server::ResponsesEventStream events(body.is_object() ? body : nlohmann::json::object());
  (void)events.feed(raw);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string raw(reinterpret_cast<const char*>(data) + 1, size - 1);
  parse_reply(raw, 1 + data[0] % 16);
  translate_request(raw);
  return 0;
}
