#pragma once
// OpenAI response bodies and stream chunks for completions and chat completions, one request's
// several choices each under its own index. Bodies are ordered_json, so fields keep the order
// they are written in (a completion's top_logprobs object lists its alternatives best first,
// as OpenAI does; nlohmann::json would sort them by token text).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::server {

/// Token counts of a whole request: prompts counted once each (not once per choice), every
/// choice's completion tokens.
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

/// One finished choice of a non-streamed response.
struct ChoiceResult {
  int64_t index = 0;
  nlohmann::ordered_json fields;          // ChoiceOutput::message(): chat message fields, or {"text": ...}
  std::vector<engine::TokenOut> tokens;   // for logprobs: echoed prompt tokens, then generated ones
  bool first_logprob_null = false;        // echo: the prompt's first token has no logprob (OpenAI, vLLM)
  nlohmann::ordered_json finish_reason;
};

/// Builds the bodies of one request: the object kind (completion or chat), its id and creation
/// time, and the logprobs in the form the endpoint has.
class ResponseBuilder {
 public:
  ResponseBuilder(bool chat, std::string model, const tokenizer::Tokenizer* tok, bool logprobs);

  /// A stream chunk of choice `index`: `fields` are its delta (chat; {} sends {"content": ""}
  /// unless it is the finishing chunk) or {"text": ...} (completions), with the logprobs of
  /// `tokens` (the first one's null when first_logprob_null).
  nlohmann::ordered_json chunk(int64_t index, const nlohmann::ordered_json& fields, const std::vector<engine::TokenOut>& tokens,
                               const nlohmann::ordered_json& finish_reason = nullptr, bool first_logprob_null = false) const;
  /// The first chat chunk of choice `index` (delta with the assistant role).
  nlohmann::ordered_json role_chunk(int64_t index) const;
  /// The chunk with usage and no choices (stream_options.include_usage).
  nlohmann::ordered_json usage_chunk(const Usage& u) const;
  /// The whole non-streamed response, choices in the order given.
  nlohmann::ordered_json full(const std::vector<ChoiceResult>& choices, const Usage& u) const;
  static nlohmann::ordered_json usage(const Usage& u);
  bool chat() const { return chat_; }

 private:
  nlohmann::ordered_json logprobs_json(const std::vector<engine::TokenOut>& tokens, bool first_null) const;
  nlohmann::ordered_json envelope(bool stream) const;
  std::string token_text(int64_t id) const;

  bool chat_;
  std::string model_, id_;
  int64_t created_;
  const tokenizer::Tokenizer* tok_;
  bool logprobs_;
};

/// finish_reason as OpenAI spells it ("abort" and "error" as vLLM does).
nlohmann::ordered_json finish_reason_json(engine::FinishReason reason);

}  // namespace fuselm::server
