#pragma once
// /v1/responses (OpenAI's Responses API) as a translation to and from chat completions: the
// request becomes a chat body that goes through the same path as /v1/chat/completions, and its
// answer (a chat.completion, or the chat event stream) becomes a Response object or the Responses
// event stream. fuselm stores nothing: the state of a conversation is kept by the client, which
// sends the earlier turns (messages, function_call and function_call_output items) in `input`;
// `previous_response_id` and `conversation` are 400s, and `store: true` is accepted but the
// response says "store": false (nothing can be retrieved later). Follows the API reference at
// platform.openai.com/docs/api-reference/responses and the openai package's types.
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "server/request_limits.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace fuselm::server {

/// The chat-completions body for a Responses body (an object): `instructions` → a system message
/// first; `input` (a string → one user message; a list of items → messages, with input_text and
/// output_text parts as text parts, function_call items → the tool_calls of the assistant
/// message they follow (a model's turn: its text, then each call) or of a new one, function_call_output → a tool message, reasoning items dropped as chat templates
/// drop earlier turns' thinking); max_output_tokens → max_completion_tokens; temperature, top_p,
/// seed, parallel_tool_calls as they are; flat function tools → chat tools; tool_choice;
/// text.format json_object/json_schema → response_format. A streamed request asks for the usage
/// chunk. Throws ApiError 400 naming the field (input[2].content[0].type, tools[0].type,
/// previous_response_id, ...) for what it cannot translate.
nlohmann::ordered_json responses_to_chat(const nlohmann::ordered_json& body);

/// The Response object for the chat.completion `completion` answered to Responses `request`:
/// output items reasoning (reasoning_content), message (content as output_text) and
/// function_call (each tool call, call_id = the tool call's id); status completed, or incomplete
/// (max_output_tokens) when the finish reason was "length"; usage as input/output tokens.
nlohmann::json chat_to_response(const nlohmann::json& completion, const nlohmann::json& request);

/// Turns the chat completion stream of one request into the Responses events: response.created
/// and response.in_progress, then per output item output_item.added, its deltas
/// (reasoning_text.delta, content_part.added + output_text.delta, function_call_arguments.delta)
/// and done events, then response.completed (or response.incomplete; an error event for a chat
/// error). Each event is an SSE frame "event: TYPE\ndata: JSON\n\n" with a sequence_number.
class ResponsesEventStream {
 public:
  explicit ResponsesEventStream(nlohmann::json request);
  /// Bytes the chat stream wrote (whole or partial "data: ...\n\n" frames); returns the frames
  /// to send for the frames completed so far.
  std::vector<std::string> feed(const std::string& bytes);

 private:
  void on_chunk(const nlohmann::json& chunk);
  void open_item(nlohmann::json item);
  void close_item();
  void emit(const std::string& type, nlohmann::json fields);
  void on_delta(const nlohmann::json& delta);
  void on_tool_call_delta(const nlohmann::json& tc);
  void on_finish(const nlohmann::json& finish_reason);
  void on_error(const nlohmann::json& error);
  nlohmann::json response(const std::string& status) const;

  nlohmann::json request_;
  std::string buffer_, id_;
  int64_t created_ = 0, sequence_ = 0;
  nlohmann::json output_ = nlohmann::json::array();  // items, the open one last
  bool open_ = false, started_ = false, ended_ = false;
  int open_tool_index_ = -1;
  nlohmann::json usage_, finish_reason_;
  std::vector<std::string> out_;
};

/// Serves POST /v1/responses: checks the fields (field_policy.h), translates the body and runs
/// it through `chat` (the chat-completions handler, which throws ApiError for a bad request), then
/// translates its answer; a stream is translated event by event as the chat stream produces them
/// (a client that hangs up cancels the request as on the chat route).
void serve_responses(const httplib::Request& req, httplib::Response& res, const RequestLimits& limits,
                     const std::function<void(const httplib::Request&, httplib::Response&)>& chat);

}  // namespace fuselm::server
