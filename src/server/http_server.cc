#include "server/http_server.h"

#include <fmt/core.h>
#include <httplib.h>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <utility>

#include "server/api_error.h"
#include "server/body_reader.h"
#include "server/chat_content.h"
#include "server/embeddings.h"
#include "server/field_policy.h"
#include "server/generation.h"
#include "server/request_fields.h"
#include "server/request_limits.h"
#include "server/responses.h"
#include "server/responses_api.h"

namespace fuselm::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {}) {
  res.status = status;
  res.set_content(dump(error_body(status, message, param)), "application/json");
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  return rng();
}

// Runs a POST handler on the request with its body read under the body cap (body_reader.h: also
// chunked bodies, which cpp-httplib's payload limit does not see), turning its exceptions into
// OpenAI error objects.
template <class F>
auto guarded(F f, size_t max_body_bytes) {
  return [f, max_body_bytes](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    try {
      httplib::Request full = req;
      full.body = read_body_capped(req, reader, max_body_bytes);
      f(std::as_const(full), res);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), e.param);
    } catch (const engine::RequestError& e) {
      send_error(res, e.status, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    }
  };
}

std::vector<int64_t> to_ids(const std::vector<uint32_t>& v) { return {v.begin(), v.end()}; }

std::vector<uint32_t> to_u32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

HttpServer::HttpServer(engine::Engine& engine, const tokenizer::PromptTokenizer* tokenizer, ServerConfig config)
    : engine_(engine), tok_(tokenizer), cfg_(std::move(config)), svr_(std::make_unique<httplib::Server>()) {
  const int threads = cfg_.threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  if (cfg_.limits.max_body_bytes > 0) svr_->set_payload_max_length(cfg_.limits.max_body_bytes);
  // SO_REUSEADDR only (cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind
  // the same port silently), and the socket is kept to widen its backlog once bound.
  svr_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  chat_formats_ = discover_chat_formats(cfg_.render_chat);
  routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  if (!svr_->bind_to_port(cfg_.host, cfg_.port))
    throw std::runtime_error(fmt::format("cannot listen on {}:{} (address in use or not available)", cfg_.host, cfg_.port));
  // listen(2) again on a listening socket only changes its backlog (Linux, POSIX).
  if (listen_fd_ < 0 || ::listen(listen_fd_, cfg_.listen_backlog) != 0)
    throw std::runtime_error(fmt::format("cannot set the listen backlog of {}:{} to {}: {}", cfg_.host, cfg_.port,
                                         cfg_.listen_backlog, std::strerror(errno)));
}

void HttpServer::serve() { svr_->listen_after_bind(); }

void HttpServer::stop() { svr_->stop(); }

void HttpServer::routes() {
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // A CORS preflight carries no credentials: install_cors answers it.
    if (cfg_.api_key.empty() || req.path.rfind("/v1", 0) != 0 || req.method == "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + cfg_.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "a valid API key is required (Authorization: Bearer <key>)");
    return httplib::Server::HandlerResponse::Handled;
  });
  install_cors(*svr_, cfg_.cors);
  svr_->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); });
  svr_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
  svr_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(engine::to_prometheus(engine_.metrics(), cfg_.model_name), "text/plain; version=0.0.4");
  });
  // Every top-level field is read, harmless, refused by name or logged (field_policy.h).
  auto policed = [this](Endpoint ep) {
    return [this, ep](const httplib::Request& q) { check_fields(parse_request_body(q.body, cfg_.limits), ep, stderr_unknown_field_log()); };
  };
  svr_->Post("/v1/completions", guarded([this, p = policed(Endpoint::completions)](const auto& q, auto& r) { p(q), generate(q, r, false); }, cfg_.limits.max_body_bytes));
  svr_->Post("/v1/chat/completions", guarded([this, p = policed(Endpoint::chat)](const auto& q, auto& r) { p(q), generate(q, r, true); }, cfg_.limits.max_body_bytes));
  svr_->Post("/v1/responses", guarded([this](const auto& q, auto& r) {
    serve_responses(q, r, cfg_.limits, [this](const httplib::Request& cq, httplib::Response& cr) { generate(cq, cr, true); });
  }, cfg_.limits.max_body_bytes));
  svr_->Post("/v1/embeddings", guarded([this, p = policed(Endpoint::embeddings)](const auto& q, auto& r) {
    p(q);
    serve_embeddings({engine_, tok_, cfg_.embedding, cfg_.limits, cfg_.model_name, cfg_.max_context}, q, r);
  }, cfg_.limits.max_body_bytes));
  svr_->Post("/tokenize", guarded([this](const auto& q, auto& r) { tokenize(q, r); }, cfg_.limits.max_body_bytes));
  svr_->Post("/detokenize", guarded([this](const auto& q, auto& r) { detokenize(q, r); }, cfg_.limits.max_body_bytes));
  svr_->Post("/apply-template", guarded([this](const auto& q, auto& r) { apply_template(q, r); }, cfg_.limits.max_body_bytes));
  svr_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) send_error(res, 404, "no route " + req.method + " " + req.path);
    if (res.status == 413 && res.body.empty())
      send_error(res, 413, body_too_large_message(cfg_.limits.max_body_bytes));
  });
}

void HttpServer::models(httplib::Response& res) const {
  json m = {{"id", cfg_.model_name}, {"object", "model"}, {"created", static_cast<int64_t>(std::time(nullptr))},
            {"owned_by", "fuselm"}, {"max_model_len", cfg_.max_context}};
  res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
}

HttpServer::Prompt HttpServer::completion_prompt(const json& p) const {
  if (p.is_string()) {
    if (!tok_) throw ApiError(400, "a text prompt needs the model's tokenizer.json; send token ids", "prompt");
    return {to_ids(tok_->encode(p.get<std::string>())), p.get<std::string>()};  // as /tokenize: the special tokens the model's files add
  }
  if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    Prompt out;
    for (const auto& x : p) {
      if (!x.is_number_integer()) throw ApiError(400, "'prompt' token ids must be integers", "prompt");
      out.ids.push_back(x.get<int64_t>());
    }
    return out;
  }
  throw ApiError(400, "'prompt' must be a string, an array of token ids, or an array of those", "prompt");
}

std::string HttpServer::echo_text(const std::vector<int64_t>& ids) const {
  if (!tok_) return {};
  return tok_->tokenizer().decode(to_u32(ids), false);
}

std::vector<HttpServer::Prompt> HttpServer::completion_prompts(const json& body) const {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'prompt' is required", "prompt");
  const json& p = *it;
  // A list of prompts (strings or token-id lists) answers one choice (n choices) per prompt.
  if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
    if (p.size() > static_cast<size_t>(max_choices))
      throw ApiError(400, fmt::format("'prompt' holds {} prompts; at most {} in one request", p.size(), max_choices), "prompt");
    std::vector<Prompt> out;
    for (const auto& one : p) {
      if (!one.is_string() && !one.is_array()) throw ApiError(400, "'prompt' must not mix text and token ids", "prompt");
      out.push_back(completion_prompt(one));
    }
    return out;
  }
  return {completion_prompt(p)};
}

std::vector<int64_t> HttpServer::chat_prompt(const json& body, const std::string& raw, ChatPlan* plan) const {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) throw ApiError(400, "'messages' must be a non-empty array", "messages");
  for (const auto& m : *it)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw ApiError(400, "each message must be an object with a string 'role'", "messages");
  if (!cfg_.render_chat) throw ApiError(400, "the model has no chat template; use /v1/completions", "messages");
  if (!tok_) throw ApiError(400, "chat needs the model's tokenizer.json", "messages");
  // Rendered from the body in request key order (json sorts keys; templates may iterate them).
  auto ordered = parse_request_body_ordered(raw, cfg_.limits);
  ChatPlan p = prepare_chat_body(ordered, chat_formats_);
  const std::string prompt = cfg_.render_chat(ordered, true);
  p.in_reasoning = starts_in_reasoning(prompt, chat_formats_.thinking);
  if (plan) *plan = std::move(p);
  return to_ids(tok_->encode_rendered(prompt));
}

void HttpServer::generate(const httplib::Request& hreq, httplib::Response& res, bool chat) {
  const Deadline deadline(cfg_.limits);
  json body = parse_request_body(hreq.body, cfg_.limits);
  if (auto m = get_string(body, "model"); m && *m != cfg_.model_name)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server has '{}')", *m, cfg_.model_name), "model");
  CommonFields c = read_common(body, chat, random_seed(), cfg_.grammar.get(), hreq.body);
  check_stops(cfg_.limits, c.request.stop, c.request.stop_token_ids.size());
  std::vector<Prompt> prompts;
  ChatPlan plan;
  if (chat) prompts.push_back({chat_prompt(body, hreq.body, &plan), std::nullopt});
  else prompts = completion_prompts(body);
  if (plan.forced) {  // tool_choice required / a named function: the reply is one call, by grammar
    if (c.request.grammar)
      throw ApiError(400, "'tool_choice' that forces a call cannot be combined with structured output", "tool_choice");
    if (!cfg_.grammar) throw ApiError(400, "'tool_choice' that forces a call needs the model's tokenizer.json", "tool_choice");
    try {
      c.request.grammar = cfg_.grammar->compile(forced_call_grammar(plan, chat_formats_));
    } catch (const grammar::GrammarError& e) {
      throw ApiError(400, std::string("'tool_choice': ") + e.what(), "tool_choice");
    }
  }
  if (static_cast<int64_t>(prompts.size()) * c.n > max_choices)
    throw ApiError(400, fmt::format("{} prompts x n = {} choices; at most {} in one request", prompts.size(), c.n, max_choices), "n");
  for (const auto& [id, bias] : c.request.sampling.logit_bias)
    if (id >= engine_.vocab_size())
      throw ApiError(400, fmt::format("'logit_bias' token id {} is outside the vocabulary (0..{})", id, engine_.vocab_size() - 1),
                     "logit_bias");
  std::vector<engine::Request> reqs;
  for (const auto& p : prompts) {
    const int64_t n = static_cast<int64_t>(p.ids.size());
    if (n >= cfg_.max_context)
      throw ApiError(400, fmt::format("the prompt has {} tokens but the model's context is {} tokens", n, cfg_.max_context),
                     chat ? "messages" : "prompt");
    const int64_t fallback = chat ? std::min(cfg_.max_context, engine_.pool_tokens()) - n : c.request.max_tokens;
    for (int64_t i = 0; i < c.n; ++i) {
      engine::Request r = c.request;
      r.prompt_ids = p.ids;
      r.max_tokens = check_max_tokens(cfg_.limits, c.max_tokens_given, c.request.max_tokens, fallback);
      if (r.sampling.min_tokens > r.max_tokens)
        throw ApiError(400, fmt::format("'min_tokens' ({}) is more than max_tokens ({})", r.sampling.min_tokens, r.max_tokens),
                       "min_tokens");
      r.sampling.seed = engine::choice_seed(c.request.sampling.seed, i);
      r.prompt_logprobs = c.echo && c.request.logprobs;
      reqs.push_back(std::move(r));
    }
  }
  if (draining_) throw ApiError(503, "the server is shutting down");
  const bool logprobs = c.request.logprobs;
  auto g = std::make_shared<Generation>();
  auto streams = engine_.submit_group(std::move(reqs), g->waker);
  for (size_t k = 0; k < streams.size(); ++k) {
    Choice choice;
    choice.index = static_cast<int64_t>(k);  // prompt-major, as OpenAI numbers n choices of several prompts
    choice.counts_prompt = static_cast<int64_t>(k) % c.n == 0;
    choice.output = chat ? make_chat_output(plan, chat_formats_) : std::make_unique<ChoiceOutput>(false);
    choice.stream = std::move(streams[k]);
    if (c.echo) {
      const Prompt& p = prompts[k / static_cast<size_t>(c.n)];
      choice.echo_text = p.text ? *p.text : echo_text(p.ids);
      choice.echo_logprobs = logprobs;
    }
    g->choices.push_back(std::move(choice));
  }
  auto rb = std::make_shared<ResponseBuilder>(chat, cfg_.model_name, tok_ ? &tok_->tokenizer() : nullptr, logprobs);
  if (!c.stream) return respond_whole(*g, *rb, deadline, hreq, res);
  respond_stream(g, rb, c.include_usage, deadline, logprobs, res);
}

void HttpServer::tokenize(const httplib::Request& req, httplib::Response& res) {
  json body = parse_request_body(req.body, cfg_.limits);
  if (!tok_) throw ApiError(400, "the model has no tokenizer.json");
  const bool special = get_bool(body, "add_special_tokens").value_or(true);
  std::vector<int64_t> ids;
  if (body.contains("messages")) {
    ids = chat_prompt(body, req.body);
  } else {
    auto text = get_string(body, "prompt");
    if (!text) text = get_string(body, "content");
    if (!text) throw ApiError(400, "give 'prompt' (or 'content') text, or 'messages'", "prompt");
    ids = to_ids(tok_->encode(*text, special));
  }
  res.set_content(dump({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", cfg_.max_context}}), "application/json");
}

void HttpServer::detokenize(const httplib::Request& req, httplib::Response& res) {
  json body = parse_request_body(req.body, cfg_.limits);
  if (!tok_) throw ApiError(400, "the model has no tokenizer.json");
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
  std::vector<uint32_t> ids;
  for (const auto& x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok_->tokenizer().vocab_size())
      throw ApiError(400, "'tokens' must hold token ids of the vocabulary", "tokens");
    ids.push_back(x.get<uint32_t>());
  }
  const std::string text = tok_->tokenizer().decode(ids, false);
  res.set_content(dump({{"prompt", text}, {"content", text}}), "application/json");
}

void HttpServer::apply_template(const httplib::Request& req, httplib::Response& res) {
  json body = parse_request_body(req.body, cfg_.limits);
  if (!body.contains("messages") || !body["messages"].is_array()) throw ApiError(400, "'messages' must be an array", "messages");
  if (!cfg_.render_chat) throw ApiError(400, "the model has no chat template", "messages");
  const bool gen = get_bool(body, "add_generation_prompt").value_or(true);
  auto ordered = parse_request_body_ordered(req.body, cfg_.limits);
  join_text_parts(ordered);
  res.set_content(dump({{"prompt", cfg_.render_chat(ordered, gen)}}), "application/json");
}

}  // namespace fuselm::server
