#pragma once
// The OpenAI-compatible HTTP server (cpp-httplib): /v1/models, /v1/completions,
// /v1/chat/completions (server-sent events when streamed), /v1/responses (responses_api.h),
// /v1/embeddings, /tokenize, /detokenize, /apply-template, /health and /metrics (Prometheus
// text), over one Engine; OPTIONS and CORS headers by cors.h; request fields checked by
// field_policy.h.
#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "server/chat_request.h"
#include "server/embedding_config.h"
#include "server/cors.h"
#include "server/request_limits.h"
#include "tokenizer/prompt_tokenizer.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace fuselm::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;     // when set, /v1/* needs "Authorization: Bearer <key>"
  std::string model_name;  // the id /v1/models lists and requests must name (or omit)
  int64_t max_context = 0;
  /// Renders a chat body's messages (and tools) to prompt text with the model's template; empty
  /// when the model has none (chat then answers 400). Throws ApiError or std::exception.
  std::function<std::string(const nlohmann::ordered_json& body, bool add_generation_prompt)> render_chat;
  int threads = 128;  // HTTP worker threads; each open stream holds one
  /// Pending-connection queue of the listening socket (listen(2)'s backlog, capped by the
  /// kernel's somaxconn). cpp-httplib 0.11 listens with 5: a burst of clients overflowed it, and
  /// the overflowed connections (SYN cookies) hung or were reset.
  int listen_backlog = 4096;
  RequestLimits limits;  // body size, JSON depth, max_tokens, timeout (request_limits.h)
  EmbeddingConfig embedding;  // how /v1/embeddings pools (embedding_config.h)
  /// Compiles the structured-output fields' grammars for the model's vocabulary (built once at
  /// startup, structured_output.h); null when the model has no tokenizer (those fields: 400).
  std::shared_ptr<grammar::Compiler> grammar;
  CorsConfig cors;       // cross-origin access (cors.h); off by default
};

class HttpServer {
 public:
  /// `engine` (started) and `tokenizer` must outlive the server. Text prompts are encoded with the
  /// tokenizer's special-token rule, rendered chat templates with nothing added (prompt_tokenizer.h).
  HttpServer(engine::Engine& engine, const tokenizer::PromptTokenizer* tokenizer, ServerConfig config);
  ~HttpServer();
  /// Binds host:port; throws std::runtime_error naming the address on failure.
  void bind();
  /// Serves until stop() (blocking).
  void serve();
  /// New generation requests get 503 from now on; in-flight ones go on.
  void drain() { draining_ = true; }
  /// Stops serving (open streams are cut; drain and wait for the engine first).
  void stop();
  const ServerConfig& config() const { return cfg_; }

 private:
  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  /// One prompt of a request: its ids, and its text (a completions prompt given as text, else
  /// empty: echo then decodes the ids).
  struct Prompt {
    std::vector<int64_t> ids;
    std::optional<std::string> text;
  };
  std::vector<Prompt> completion_prompts(const nlohmann::json& body) const;
  Prompt completion_prompt(const nlohmann::json& p) const;
  /// The text echo puts before a choice given its prompt's token ids (decoded; empty without a
  /// tokenizer).
  std::string echo_text(const std::vector<int64_t>& ids) const;
  std::vector<int64_t> chat_prompt(const nlohmann::json& body, const std::string& raw, ChatPlan* plan = nullptr) const;
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void apply_template(const httplib::Request& req, httplib::Response& res);
  void models(httplib::Response& res) const;

  engine::Engine& engine_;
  const tokenizer::PromptTokenizer* tok_;
  ServerConfig cfg_;
  std::unique_ptr<httplib::Server> svr_;
  std::atomic<bool> draining_{false};
  ChatFormats chat_formats_;  // the template's tool/reasoning formats, found once (chat_request.h)
  int listen_fd_ = -1;  // the socket cpp-httplib bound (recorded by its socket-options hook)
};

}  // namespace fuselm::server
