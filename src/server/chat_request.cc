#include "server/chat_request.h"

#include <fmt/core.h>

#include "server/api_error.h"
#include "server/chat_content.h"
#include "server/tool_grammar.h"

namespace fuselm::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kKnownRoles[] = {"system", "developer", "user", "assistant", "tool", "function"};

/// Whether the template has a developer role: its render of a developer message differs from
/// its render of a message of a made-up role (beyond the role's name itself).
bool renders_developer_role(const ChatRenderFn& render) {
  auto body = [](const char* role) {
    return ojson{{"messages", {{{"role", role}, {"content", "zqxdev"}}, {{"role", "user"}, {"content", "zqxuser"}}}}};
  };
  std::string dev, other;
  try {
    dev = render(body("developer"), true);
  } catch (const std::exception&) {
    return false;
  }
  try {
    other = render(body("zqxrole"), true);
  } catch (const std::exception&) {
    return dev.find("zqxdev") != std::string::npos;  // refuses unknown roles, renders this one
  }
  for (size_t at = dev.find("developer"); at != std::string::npos; at = dev.find("developer", at))
    dev.replace(at, 9, "zqxrole");
  return dev != other && dev.find("zqxdev") != std::string::npos;
}

void check_role(ojson& m, size_t i, const ChatFormats& f) {
  const std::string role = m["role"];
  bool known = false;
  for (const char* r : kKnownRoles) known = known || role == r;
  if (!known) {
    const std::string shown = role.size() > 40 ? role.substr(0, 40) + "..." : role;
    throw ApiError(400, fmt::format("messages[{}].role '{}' is not a chat role (system, developer, user, assistant, tool)", i, shown),
                   "messages");
  }
  if (role == "developer" && !f.developer_role) m["role"] = "system";
}

/// An assistant turn's tool_calls as templates expect them: arguments as an object.
void normalize_tool_calls(ojson& m, size_t i) {
  if (!m.contains("tool_calls") || m["tool_calls"].is_null()) return;
  auto& calls = m["tool_calls"];
  const std::string where = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) throw ApiError(400, where + " must be an array", "messages");
  for (size_t j = 0; j < calls.size(); ++j) {
    auto& c = calls[j];
    const std::string at = fmt::format("{}[{}]", where, j);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      throw ApiError(400, at + " must be an object with function.name", "messages");
    auto& fn = c["function"];
    if (!fn.contains("arguments") || fn["arguments"].is_null()) fn["arguments"] = ojson::object();
    if (fn["arguments"].is_string()) {
      auto parsed = ojson::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_object()) throw ApiError(400, at + ".function.arguments must be a JSON object (or its text)", "messages");
      fn["arguments"] = std::move(parsed);
    } else if (!fn["arguments"].is_object()) {
      throw ApiError(400, at + ".function.arguments must be a JSON object (or its text)", "messages");
    }
  }
  if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
}

void check_messages(ojson& body, const ChatFormats& f) {
  auto& messages = body["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    auto& m = messages[i];
    check_role(m, i, f);
    if (m["role"] == "assistant") normalize_tool_calls(m, i);
    // Reasoning sent back as reasoning_content reaches a template that reads it under another key.
    const std::string& key = f.thinking.message_key;
    if (!key.empty() && key != "reasoning_content" && m.contains("reasoning_content") && !m.contains(key))
      m[key] = m["reasoning_content"];
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() && !m["content"].is_array())
      throw ApiError(400, fmt::format("messages[{}].content must be a string, an array of parts or null", i), "messages");
  }
  join_text_parts(body);
}

/// The tool names of `tools`, checked as OpenAI's function tools.
void check_tools(const ojson& tools) {
  if (!tools.is_array()) throw ApiError(400, "'tools' must be an array of function tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      throw ApiError(400, fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i), "tools");
    const auto& fn = t["function"];
    if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
      throw ApiError(400, fmt::format("tools[{}].function.parameters must be a JSON Schema object", i), "tools");
  }
}

/// tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}}.
/// Returns the name forced ("" for required), or nullopt for auto/none (*none set).
std::optional<std::string> read_tool_choice(const ojson& body, const ojson& tools, bool* none) {
  *none = false;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return std::nullopt;
  const auto& tc = body["tool_choice"];
  if (tc == "auto") return std::nullopt;
  if (tc == "none") return *none = true, std::nullopt;
  if (tc == "required") return std::string();
  if (tc.is_object() && tc.value("type", "") == "function" && tc.contains("function") && tc["function"].is_object() &&
      tc["function"].contains("name") && tc["function"]["name"].is_string()) {
    const std::string name = tc["function"]["name"];
    for (const auto& t : tools)
      if (t["function"]["name"] == name) return name;
    throw ApiError(400, fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", name.substr(0, 80)), "tool_choice");
  }
  throw ApiError(400, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                 "tool_choice");
}

void check_template_kwargs(ojson& body) {
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const auto& k = body["chat_template_kwargs"];
    if (!k.is_object()) throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt"})
      if (k.contains(reserved))
        throw ApiError(400, fmt::format("'chat_template_kwargs' must not set '{}' (give it as the request field)", reserved),
                       "chat_template_kwargs");
  }
  if (body.contains("enable_thinking") && !body["enable_thinking"].is_null() && !body["enable_thinking"].is_boolean())
    throw ApiError(400, "'enable_thinking' must be a boolean", "enable_thinking");
}

/// A choice's output read by a ChatOutputParser.
class ParsedChatOutput : public ChoiceOutput {
 public:
  ParsedChatOutput(const ChatPlan& plan, const ChatFormats& f)
      : ChoiceOutput(true),
        parser_(plan.parse_tools ? &f.tools : nullptr, plan.tools, f.thinking, plan.in_reasoning) {}

  nlohmann::ordered_json delta(const std::string& text, bool last) override {
    OutputDelta d = parser_.feed(text);
    if (last) merge(d, parser_.finish());
    return fields(d, false);
  }

  nlohmann::ordered_json message(const std::string& text) override {
    OutputDelta d = parser_.feed(text);
    merge(d, parser_.finish());
    return fields(d, true);
  }

  nlohmann::ordered_json finish_reason(engine::FinishReason reason) override {
    if (!parser_.calls().empty() && reason == engine::FinishReason::stop) return "tool_calls";
    return finish_reason_json(reason);
  }

 private:
  static void merge(OutputDelta& d, const OutputDelta& more) {
    d.reasoning += more.reasoning;
    d.content += more.content;
    for (const auto& c : more.calls) d.calls.push_back(c);
  }

  static nlohmann::ordered_json fields(const OutputDelta& d, bool whole) {
    ojson out = ojson::object();
    if (whole) out["role"] = "assistant";
    if (whole || !d.content.empty()) out["content"] = d.content.empty() && !d.calls.empty() ? ojson() : ojson(d.content);
    if (!d.reasoning.empty()) out["reasoning_content"] = d.reasoning;
    if (!d.calls.empty()) {
      ojson calls = ojson::array();
      for (const auto& [i, c] : d.calls) {
        // The id stays 9 alphanumerics: templates that read ids back refuse other forms.
        ojson one = ojson::object();
        if (!whole) one["index"] = i;
        one["id"] = c.id;
        one["type"] = "function";
        one["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        calls.push_back(one);
      }
      out["tool_calls"] = calls;
    }
    return out;
  }

  ChatOutputParser parser_;
};

}  // namespace

ChatFormats discover_chat_formats(const ChatRenderFn& render) {
  ChatFormats f;
  if (!render) return f;
  auto probe = [&render](const ojson& vars) {
    ojson body = {{"messages", vars.at("messages")}};
    if (vars.contains("tools")) body["tools"] = vars["tools"];
    return render(body, vars.value("add_generation_prompt", false));
  };
  f.tools = tmpl::discover_tool_format(probe);
  f.thinking = tmpl::discover_thinking_format(probe);
  f.developer_role = renders_developer_role(render);
  return f;
}

ChatPlan prepare_chat_body(ojson& body, const ChatFormats& formats) {
  ChatPlan plan;
  check_messages(body, formats);
  check_template_kwargs(body);
  const bool has_tools = body.contains("tools") && !body["tools"].is_null() && !(body["tools"].is_array() && body["tools"].empty());
  if (!has_tools) {
    if (body.contains("tool_choice") && !body["tool_choice"].is_null() && body["tool_choice"] != "none" && body["tool_choice"] != "auto")
      throw ApiError(400, "'tool_choice' needs 'tools'", "tool_choice");
    return plan;
  }
  check_tools(body["tools"]);
  bool none = false;
  const auto forced = read_tool_choice(body, body["tools"], &none);
  if (none) {  // no call can come: the tools are not shown to the model
    body.erase("tools");
    return plan;
  }
  if (!formats.tools.supported)
    throw ApiError(400, "the model's chat template cannot express tool calls (its tool format could not be derived: " +
                            formats.tools.why + "); send the request without 'tools'", "tools");
  plan.parse_tools = true;
  plan.tools = nlohmann::json::parse(body["tools"].dump());
  plan.forced = forced;
  return plan;
}

grammar::Grammar forced_call_grammar(const ChatPlan& plan, const ChatFormats& formats) {
  grammar::Grammar call = tool_call_grammar(formats.tools, plan.tools, plan.forced.value_or(""));
  if (!plan.in_reasoning) return call;
  return grammar::Grammar::concat({grammar::Grammar::literal(formats.thinking.close), call});
}

std::unique_ptr<ChoiceOutput> make_chat_output(const ChatPlan& plan, const ChatFormats& formats) {
  if (!plan.parse_tools && formats.thinking.close.empty()) return std::make_unique<ChoiceOutput>(true);
  return std::make_unique<ParsedChatOutput>(plan, formats);
}

}  // namespace fuselm::server
