// prepare_chat_body: the message shapes agents send and the tools/tool_choice checks.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/chat_request.h"

namespace fuselm::server {
namespace server_chat_request_test {

using nlohmann::ordered_json;

ChatFormats json_tools_format() {
  ChatFormats f;
  f.tools.supported = true;
  f.tools.call_open = "<tool_call>\n";
  f.tools.call_close = "\n</tool_call>";
  f.tools.name_key = "name";
  f.tools.args_key = "arguments";
  return f;
}

std::pair<std::string, std::string> error_of(ordered_json body, const ChatFormats& f) {
  try {
    prepare_chat_body(body, f);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return {e.param, e.what()};
  }
  return {"", ""};
}

TEST(ChatRequest, AgentHistoryShapes) {
  auto body = ordered_json::parse(R"({"messages": [
    {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "reasoning_content": "r",
     "tool_calls": [{"id": "abcDEF123", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "abcDEF123", "content": "2"}]})");
  ChatFormats f = json_tools_format();
  f.thinking.message_key = "thinking";
  prepare_chat_body(body, f);
  const auto& m = body["messages"];
  EXPECT_EQ(m[0]["role"], "system");  // no developer role in this template
  EXPECT_EQ(m[0]["content"], "be brief");
  EXPECT_EQ(m[2]["content"], "");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], ordered_json::parse(R"({"a": 1})"));
  EXPECT_EQ(m[2]["thinking"], "r");
  f.developer_role = true;
  auto kept = ordered_json::parse(R"({"messages": [{"role": "developer", "content": "x"}]})");
  prepare_chat_body(kept, f);
  EXPECT_EQ(kept["messages"][0]["role"], "developer");
}

TEST(ChatRequest, RefusalsNameTheField) {
  const ChatFormats f = json_tools_format();
  auto [p1, m1] = error_of(ordered_json::parse(R"({"messages": [{"role": "wizard", "content": "x"}]})"), f);
  EXPECT_EQ(p1, "messages");
  EXPECT_NE(m1.find("messages[0].role 'wizard'"), std::string::npos) << m1;
  auto [p2, m2] = error_of(ordered_json::parse(R"({"messages": [{"role": "assistant", "content": null,
      "tool_calls": [{"function": {"name": "f", "arguments": "[1"}}]}]})"), f);
  EXPECT_NE(m2.find("messages[0].tool_calls[0].function.arguments"), std::string::npos) << m2;
  const auto tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  auto [p3, m3] = error_of(ordered_json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + tools +
                                               R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})"), f);
  EXPECT_EQ(p3, "tool_choice");
  ChatFormats none;
  none.tools.why = "the template does not render tools";
  auto [p4, m4] = error_of(ordered_json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + tools + "}"), none);
  EXPECT_EQ(p4, "tools");
  EXPECT_NE(m4.find("the template does not render tools"), std::string::npos) << m4;
  auto [p5, m5] = error_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 3})"), f);
  EXPECT_EQ(p5, "chat_template_kwargs");
}

TEST(ChatRequest, ToolChoiceNoneDropsTheToolsAndRequiredIsForced) {
  ChatFormats none;  // even a template without a tool format: no call can come
  auto body = ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  const ChatPlan plan = prepare_chat_body(body, none);
  EXPECT_FALSE(body.contains("tools"));
  EXPECT_FALSE(plan.parse_tools);
  auto forced = ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})");
  const ChatPlan p2 = prepare_chat_body(forced, json_tools_format());
  EXPECT_TRUE(p2.parse_tools);
  ASSERT_TRUE(p2.forced.has_value());
  EXPECT_EQ(*p2.forced, "");
}

}  // namespace server_chat_request_test
}  // namespace fuselm::server
