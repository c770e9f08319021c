#pragma once
// POST /v1/embeddings (OpenAI's shape): `input` a string, a list of strings, a list of token ids
// or a list of token-id lists; `encoding_format` float (default) or base64 (little-endian f32);
// `dimensions` only the model's own width; `normalize` (vLLM's, default true) false skips the L2
// normalisation. Each input is a request to the same engine (batched
// with everything else); its final hidden states are pooled as EmbeddingConfig says.
#include "engine/engine.h"
#include "server/embedding_config.h"
#include "server/request_limits.h"
#include "tokenizer/prompt_tokenizer.h"

namespace httplib {
class Request;
class Response;
}  // namespace httplib

namespace fuselm::server {

/// What an embeddings request reads of the server.
struct EmbeddingsContext {
  engine::Engine& engine;
  const tokenizer::PromptTokenizer* tokenizer;  // may be null: then only token ids
  const EmbeddingConfig& config;
  const RequestLimits& limits;
  const std::string& model_name;
  int64_t max_context = 0;
};

/// Answers one embeddings request on `res`. Throws ApiError (400 naming the field, 404 for
/// another model, 504 past the deadline) or engine::RequestError.
void serve_embeddings(const EmbeddingsContext& ctx, const httplib::Request& hreq, httplib::Response& res);

/// Standard base64 (RFC 4648, padded) of `bytes`.
std::string base64_encode(std::string_view bytes);

}  // namespace fuselm::server
