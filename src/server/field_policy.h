#pragma once
// What the server does with each top-level field of a request body, so that nothing fails open
// silently (issue 30). Every field is one of:
//  - read: a reader of that endpoint takes it (and enforces it, or answers 400 naming it);
//  - harmless: honouring it would not change the output (user, metadata, store, ...): accepted;
//  - unsupported: honouring it would change the output and fuselm cannot (beam search, other
//    servers' samplers, ...): 400 naming it, unless its value is the one that changes nothing
//    (typical_p 1, use_beam_search false, ...) or null;
//  - unknown: any other name: accepted, and logged to stderr once per name.
// The table (field_policy.cc) follows OpenAI's API reference, vLLM's extra request parameters
// (vllm/entrypoints/openai/protocol.py) and llama-server's /completion fields (tools/server/README.md).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace fuselm::server {

enum class Endpoint { completions, chat, responses, embeddings };
enum class FieldKind { read, harmless, unsupported, unknown };

/// What `name` is for `endpoint` (a field read by another endpoint only is unknown here).
FieldKind classify_field(Endpoint endpoint, std::string_view name);

/// The names logged so far, each once, at most `max_names` of them (a client sending endless
/// new names must not grow memory or the log without bound): the log says once when it stops.
class UnknownFieldLog {
 public:
  using Sink = std::function<void(const std::string& line)>;
  explicit UnknownFieldLog(Sink sink, size_t max_names = 1024) : sink_(std::move(sink)), max_(max_names) {}
  /// Logs `name` (JSON-quoted, cut at 80 bytes) if it was not logged before.
  void note(std::string_view endpoint, std::string_view name);

 private:
  Sink sink_;
  size_t max_;
  std::mutex mu_;
  std::set<std::string, std::less<>> seen_;
  bool full_ = false;
};

/// The process's log, writing lines to stderr.
UnknownFieldLog& stderr_unknown_field_log();

/// Checks every top-level field of `body` (an object; anything else is left to the reader):
/// throws ApiError 400 naming the first unsupported field whose value is not null or its neutral
/// value, with what to use instead when fuselm has it; notes unknown fields in `log`.
void check_fields(const nlohmann::json& body, Endpoint endpoint, UnknownFieldLog& log);

/// The endpoint's path ("/v1/chat/completions", ...), for messages.
std::string_view endpoint_path(Endpoint endpoint);

}  // namespace fuselm::server
