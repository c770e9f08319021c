// libFuzzer target: a chat template and its context. The input up to its first NUL byte is the
// Jinja source, the rest a JSON object of variables (messages, tools, add_generation_prompt, ...;
// a fixed conversation when it is absent or not valid JSON). Rendering returns text or throws
// TemplateError (parse errors, unsupported constructs, raise_exception, the sandbox's recursion,
// loop and output bounds); anything else (a crash, a hang, a sanitizer report, another exception)
// is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/json_limited.h"
#include "template/chat_template.h"

namespace {

const char* const kDefaultContext = R"({"messages": [
  {"role": "system", "content": "You are helpful."},
  {"role": "user", "content": "Hi <b>there</b> \u00e9"},
  {"role": "assistant", "content": "Hello!", "tool_calls": [{"type": "function",
    "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
  {"role": "tool", "content": "42"}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";

nlohmann::ordered_json context_of(std::string_view rest) {
  try {
    auto j = fuselm::base::parse_json_limited_as<nlohmann::ordered_json>(std::string(rest), 64);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::ordered_json::parse(kDefaultContext);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source(in.substr(0, nul));
  const auto context = context_of(nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1));
  try {
    (void)fuselm::tmpl::render(source, context);
  } catch (const fuselm::tmpl::TemplateError&) {
  }
  return 0;
}
