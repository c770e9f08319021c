#pragma once
// One generation request's choices and the loops that answer it: the whole response once every
// choice has finished, or server-sent events as each choice's tokens come. A request holds one
// choice per (prompt, n) pair, each an engine stream with its index; the text of every event of
// a choice passes through that choice's ChoiceOutput, the one place where output text becomes
// response fields (a chat output parser for tool calls or reasoning derives from it).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/request_limits.h"
#include "server/responses.h"

namespace httplib {
class Request;
class Response;
}  // namespace httplib

namespace fuselm::server {

/// Turns one choice's output text into its response fields. This default passes the text
/// through: {"content": text} for chat, {"text": text} for completions. Not thread-safe: one
/// choice's events are fed in order by one thread.
class ChoiceOutput {
 public:
  explicit ChoiceOutput(bool chat) : chat_(chat) {}
  virtual ~ChoiceOutput() = default;
  /// The delta fields of a streamed chunk for `text`, the text one event made safe to show
  /// (`last` on the choice's final event). An empty object when there is nothing to show.
  virtual nlohmann::ordered_json delta(const std::string& text, bool last);
  /// The message fields of a non-streamed choice from its whole text.
  virtual nlohmann::ordered_json message(const std::string& text);
  /// The finish_reason to report for the engine's `reason` (a tool-call parser may say "tool_calls").
  virtual nlohmann::ordered_json finish_reason(engine::FinishReason reason) { return finish_reason_json(reason); }

 protected:
  bool chat_;
};

/// One choice: the engine stream generating it and what the response adds around it.
struct Choice {
  int64_t index = 0;
  std::shared_ptr<engine::RequestStream> stream;
  std::unique_ptr<ChoiceOutput> output;
  bool counts_prompt = true;  // the first choice of its prompt: usage counts the prompt once
  std::string echo_text;      // completions' echo: the prompt text put before the output
  bool echo_logprobs = false; // echo with logprobs: the prompt's tokens open the logprobs
  // Gathered while answering.
  std::string text;
  std::vector<engine::TokenOut> tokens;
  bool finished = false, started = false;
  engine::Event last;
};

/// A request's choices, woken together.
struct Generation {
  std::vector<Choice> choices;
  std::shared_ptr<engine::StreamWaker> waker = std::make_shared<engine::StreamWaker>();
  void cancel_all() {
    for (auto& c : choices) c.stream->cancel();
  }
  /// Usage over the finished choices.
  Usage usage() const;
};

/// Waits until every choice has finished and sets the whole response on `res`. Cancels every
/// choice when the client hangs up (then sets nothing) or the deadline passes (ApiError 504);
/// a failed forward is ApiError 500.
void respond_whole(Generation& g, const ResponseBuilder& rb, const Deadline& deadline, const httplib::Request& hreq,
                   httplib::Response& res);
/// Answers with server-sent events: chat role chunks, each choice's chunks as its events come,
/// each choice's finishing chunk, the usage chunk (when `include_usage`), then [DONE]. A client
/// that stops reading, an error or the deadline cancels every choice.
void respond_stream(std::shared_ptr<Generation> g, std::shared_ptr<ResponseBuilder> rb, bool include_usage,
                    const Deadline& deadline, bool logprobs, httplib::Response& res);

}  // namespace fuselm::server
