#pragma once
// OpenAI response bodies and stream chunks for completions and chat completions.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::server {

/// Builds the bodies of one request: the object kind (completion or chat), its id and creation
/// time, and the logprobs in the form the endpoint has.
class ResponseBuilder {
 public:
  ResponseBuilder(bool chat, std::string model, const tokenizer::Tokenizer* tok, bool logprobs);

  /// A stream chunk carrying `text` and the logprobs of `tokens` (chat: a delta).
  nlohmann::json chunk(const std::string& text, const std::vector<engine::TokenOut>& tokens,
                       const nlohmann::json& finish_reason = nullptr) const;
  /// The first chat chunk (delta with the assistant role).
  nlohmann::json role_chunk() const;
  /// The chunk with usage and no choices (stream_options.include_usage).
  nlohmann::json usage_chunk(const engine::Event& last) const;
  /// The whole non-streamed response.
  nlohmann::json full(const std::string& text, const std::vector<engine::TokenOut>& tokens, const engine::Event& last) const;
  static nlohmann::json usage(const engine::Event& last);

 private:
  nlohmann::json logprobs_json(const std::vector<engine::TokenOut>& tokens, size_t text_offset) const;
  nlohmann::json envelope(bool stream) const;
  std::string token_text(int64_t id) const;

  bool chat_;
  std::string model_, id_;
  int64_t created_;
  const tokenizer::Tokenizer* tok_;
  bool logprobs_;
};

/// finish_reason as OpenAI spells it ("abort" and "error" as vLLM does).
nlohmann::json finish_reason_json(engine::FinishReason reason);

}  // namespace fuselm::server
