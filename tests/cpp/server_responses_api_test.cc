// responses_api: the Responses body → chat body translation, a chat.completion → Response object
// (reasoning, text and tool calls as output items), and the chat stream → Responses events.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/responses_api.h"

namespace fuselm::server {
namespace server_responses_api_test {

using nlohmann::json;

std::string param_of(const nlohmann::ordered_json& body) {
  try {
    responses_to_chat(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "";
}

TEST(ResponsesApi, StringInputAndInstructions) {
  const auto chat = responses_to_chat({{"model", "m"}, {"input", "hi"}, {"instructions", "be brief"}, {"max_output_tokens", 5},
                                       {"temperature", 0.5}, {"stream", true}});
  EXPECT_EQ(json(chat), json::parse(R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": "hi"}], "max_completion_tokens": 5, "temperature": 0.5, "stream": true,
      "stream_options": {"include_usage": true}})"));
}

TEST(ResponsesApi, ItemsBecomeMessagesAndToolTurns) {
  const auto body = nlohmann::ordered_json::parse(R"({"input": [
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"city\": \"Rome\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]}],
    "tools": [{"type": "function", "name": "w", "description": "d", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "w"},
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}}})");
  EXPECT_EQ(json(responses_to_chat(body)), json::parse(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]}],
    "tools": [{"type": "function", "function": {"name": "w", "description": "d", "parameters": {"type": "object"}, "strict": true}}],
    "tool_choice": {"type": "function", "function": {"name": "w"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": true}}})"));
}

TEST(ResponsesApi, AModelTurnsTextAndCallsAreOneAssistantMessage) {
  const auto body = nlohmann::ordered_json::parse(R"({"input": [{"role": "user", "content": "q"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
      {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})");
  EXPECT_EQ(json(responses_to_chat(body)["messages"]), json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}],
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}])"));
}

TEST(ResponsesApi, RequestKeyOrderReachesTheChatBody) {
  // The chat template renders tools as given (tojson): the schema keeps the client's key order.
  const auto body = nlohmann::ordered_json::parse(
      R"({"input": "x", "tools": [{"type": "function", "name": "w", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}]})");
  EXPECT_EQ(responses_to_chat(body)["tools"][0]["function"]["parameters"].dump(), R"({"type":"object","properties":{"z":{},"a":{}}})");
}

TEST(ResponsesApi, UntranslatableFieldsAreNamed) {
  EXPECT_EQ(param_of({{"input", "x"}, {"previous_response_id", "r"}}), "previous_response_id");
  EXPECT_EQ(param_of({{"instructions", "x"}}), "input");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})")),
            "input[0].content[0].type");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": [{"type": "function_call", "name": "w", "arguments": "{}"}]})")), "input[0].call_id");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "tools": [{"type": "file_search"}]})")), "tools[0].type");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "tool_choice": {"type": "web_search"}})")), "tool_choice");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "include": ["reasoning.encrypted_content"]})")), "include");
  // Members of the wrong JSON type are 400s naming them (never a type error, which would be a 500).
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": [{"type": 5}]})")), "input[0].type");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": [{"role": "user", "content": [{"type": null}]}]})")), "input[0].content[0].type");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": [{"role": 1, "content": "x"}]})")), "input[0].role");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "tools": [{"type": "function", "name": 3}]})")), "tools[0].name");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": 3}}, "stream": "yes"})")), "");
  EXPECT_EQ(param_of(nlohmann::ordered_json::parse(R"({"input": "x", "store": true, "reasoning": {"summary": null}, "truncation": "disabled"})")), "");
}

TEST(ResponsesApi, ChatCompletionBecomesOutputItems) {
  const json completion = json::parse(R"({"id": "chatcmpl-7", "created": 11, "model": "m", "choices": [{"index": 0,
      "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "", "reasoning_content": "think",
      "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}}],
      "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 2}}})");
  const json r = chat_to_response(completion, {{"input", "x"}, {"temperature", 0}});
  EXPECT_EQ(r["id"], "resp_7");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["temperature"], 0);
  ASSERT_EQ(r["output"].size(), 2u);  // the empty text is no message item when there are calls
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "think");
  EXPECT_EQ(r["output"][1]["type"], "function_call");
  EXPECT_EQ(r["output"][1]["call_id"], "call_a");
  EXPECT_EQ(r["output"][1]["name"], "w");
  EXPECT_EQ(r["usage"]["input_tokens"], 3);
  EXPECT_EQ(r["usage"]["output_tokens"], 4);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 2);
  const json cut = chat_to_response(json::parse(R"({"id": "chatcmpl-8", "choices": [{"finish_reason": "length",
      "message": {"role": "assistant", "content": "abc"}}]})"), json::object());
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["output"][0]["content"][0]["text"], "abc");
}

std::vector<json> events_of(ResponsesEventStream& s, const std::string& bytes) {
  std::vector<json> out;
  for (const auto& frame : s.feed(bytes)) {
    const auto data = frame.find("\ndata: ");
    EXPECT_EQ(frame.substr(0, 7), "event: ");
    out.push_back(json::parse(frame.substr(data + 7)));
    EXPECT_EQ(frame.substr(7, data - 7), out.back()["type"]);
  }
  return out;
}

std::string sse(const std::string& payload) { return "data: " + payload + "\n\n"; }

TEST(ResponsesApi, ChatStreamBecomesResponsesEvents) {
  ResponsesEventStream s(json{{"model", "m"}});
  std::string all = sse(R"({"id": "chatcmpl-9", "model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {"reasoning_content": "hm"}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {"content": "He"}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {"content": "llo"}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_z", "function": {"name": "w", "arguments": "{\"a\""}}]}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [{"delta": {}, "finish_reason": "tool_calls"}]})") +
                    sse(R"({"id": "chatcmpl-9", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 5}})") + sse("[DONE]");
  // Fed in two pieces split inside a frame: frames are reassembled.
  auto ev = events_of(s, all.substr(0, 100));
  for (auto& e : events_of(s, all.substr(100))) ev.push_back(e);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], i);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress",
                       "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
                       "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  const json& final = ev.back()["response"];
  EXPECT_EQ(final["status"], "completed");
  EXPECT_EQ(final["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(final["output"][2]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(final["output"][2]["call_id"], "call_z");
  EXPECT_EQ(final["usage"]["output_tokens"], 5);
}

TEST(ResponsesApi, ChatStreamErrorBecomesFailed) {
  ResponsesEventStream s(json::object());
  auto ev = events_of(s, sse(R"({"id": "chatcmpl-3", "choices": [{"delta": {"content": "a"}}]})") +
                             sse(R"({"error": {"message": "timed out", "type": "server_error", "code": 504}})") + sse("[DONE]"));
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[ev.size() - 2]["type"], "error");
  EXPECT_EQ(ev.back()["type"], "response.failed");
  EXPECT_EQ(ev.back()["response"]["error"]["message"], "timed out");
}

}  // namespace server_responses_api_test
}  // namespace fuselm::server
