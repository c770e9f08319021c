// fuselm serve: the OpenAI-compatible server over the continuous-batching engine.
#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <pthread.h>
#include <thread>

#include "cli/chat_renderer.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/model_args.h"
#include "cli/speculative_args.h"
#include "cli/verify_stamp.h"
#include "cli/serve_limits.h"
#include "server/http_server.h"
#include "server/structured_output.h"

namespace fuselm::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  EngineArgs engine;
  SpeculativeArgs speculative;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  server::RequestLimits limits;
  std::string pooling;  // --pooling: how /v1/embeddings pools (empty: the model's config, else last)
  std::string allowed_origins, allowed_methods = "*", allowed_headers = "*";
  bool allow_credentials = false;
};

// The CORS flags as vLLM takes them (server/cors.h): JSON lists or comma lists.
server::CorsConfig cors_config(const ServeArgs& a) {
  server::CorsConfig c;
  c.allowed_origins = server::parse_list_flag("--allowed-origins", a.allowed_origins);
  c.allowed_methods = server::parse_list_flag("--allowed-methods", a.allowed_methods);
  c.allowed_headers = server::parse_list_flag("--allowed-headers", a.allowed_headers);
  c.allow_credentials = a.allow_credentials;
  return c;
}

// Waits for SIGINT/SIGTERM (blocked in every thread, so only this one sees them): new requests
// get 503, in-flight ones finish (a second signal, or 60 s, aborts them), then the server stops.
void handle_signals(sigset_t set, server::HttpServer& srv, engine::Engine& eng) {
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "fuselm: %s: finishing in-flight requests (signal again to abort them)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  srv.drain();
  const timespec tick{0, 100'000'000};
  for (int i = 0; i < 600; ++i) {
    const auto m = eng.metrics();
    if (m.running + m.waiting == 0) break;
    if (sigtimedwait(&set, nullptr, &tick) > 0) break;
  }
  eng.shutdown(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let handlers send their last events
  srv.stop();
}

void run(ServeArgs& a) {
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  const server::CorsConfig cors = cors_config(a);  // flag errors before the model loads
  apply_pool_sizing(a.engine, a.model);
  const std::filesystem::path dir = model_dir_of(a.model.model_dir);
  auto loaded = load_model(a.model);
  hint_verify_once(loaded.dir, a.model.model_dir);
  engine::ModelBackend backend(*loaded.model);
  const Speculation spec = setup_speculation(a.speculative, *loaded.model, a.model);  // its draft model lives as long
  engine::EngineOptions options = a.engine.options();
  options.speculative = spec.options;
  engine::Engine eng(backend, loaded.tokenizer ? &loaded.tokenizer->tokenizer() : nullptr, options);
  server::ServerConfig cfg;
  cfg.host = a.host;
  cfg.port = a.port;
  cfg.api_key = a.api_key;
  cfg.model_name = a.served_model_name.empty() ? std::filesystem::absolute(dir).lexically_normal().filename().string()
                                               : a.served_model_name;
  if (cfg.model_name.empty()) cfg.model_name = std::filesystem::absolute(dir).parent_path().filename().string();
  cfg.max_context = loaded.model->max_context();
  cfg.render_chat = make_chat_renderer(dir);
  cfg.threads = std::max(128, 2 * a.engine.max_num_seqs + 16);
  cfg.limits = a.limits;
  cfg.embedding = server::embedding_config(dir, a.pooling.empty() ? std::nullopt : engine::parse_pooling(a.pooling));
  if (loaded.tokenizer)  // structured output (response_format, guided_*, grammar): its compiler, once
    cfg.grammar = server::make_grammar_compiler(loaded.tokenizer->tokenizer(), backend.vocab_size(), backend.eos_token_ids());
  cfg.cors = cors;
  server::HttpServer srv(eng, loaded.tokenizer ? &*loaded.tokenizer : nullptr, cfg);
  srv.bind();
  eng.start();
  const auto& kv = loaded.model->kv_cache();
  std::fprintf(stderr, "fuselm: serving %s at http://%s:%d (KV pool %lld tokens: %d blocks of %d, %s, %.2f GB; chat template: %s)\n",
               cfg.model_name.c_str(), a.host.c_str(), a.port, static_cast<long long>(kv.num_slots()),
               kv.pool().num_blocks(), kv.block_size(), kv::kv_dtype_name(kv.dtype()),
               kv.num_slots() * kv.bytes_per_token() / 1e9,
               cfg.render_chat ? "yes" : "none, chat completions answer 400");
  std::fprintf(stderr, "fuselm: embeddings: %s pooling (%s), normalised\n", engine::pooling_name(cfg.embedding.pooling),
               cfg.embedding.source.c_str());
  if (a.speculative.enabled())
    std::fprintf(stderr, "fuselm: speculative decoding: %s, off while more than %d sequences run\n", describe(a.speculative).c_str(),
                 a.speculative.disable_by_batch_size);
  if (!loaded.model->selects_rows())
    std::fprintf(stderr, "fuselm: note: every token of a batch goes through the LM head (%s)\n",
                 loaded.model->select_rows_note().c_str());
  std::thread signals(handle_signals, set, std::ref(srv), std::ref(eng));
  srv.serve();
  signals.join();
  std::fprintf(stderr, "fuselm: server stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API (continuous batching)");
  add_model_options(*cmd, a->model);
  add_engine_options(*cmd, a->engine);
  add_speculative_options(*cmd, a->speculative);
  cmd->add_option("--host", a->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", a->port, "port to bind")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--pooling", a->pooling,
                  "how /v1/embeddings pools the final hidden states: mean, last or cls (default: the model's "
                  "sentence-transformers config, else last)")
      ->check(CLI::IsMember({"mean", "last", "cls"}));
  cmd->add_option("--served-model-name", a->served_model_name, "model id in the API (default: the directory's name)");
  add_limit_options(*cmd, a->limits);
  cmd->add_option("--allowed-origins", a->allowed_origins,
                  "origins a browser page may call the API from (CORS): a JSON list or comma list, \"*\" for any; default: none (no CORS headers)");
  cmd->add_option("--allowed-methods", a->allowed_methods, "methods cross-origin requests may use (JSON or comma list)")->capture_default_str();
  cmd->add_option("--allowed-headers", a->allowed_headers, "request headers cross-origin requests may send (JSON or comma list)")->capture_default_str();
  cmd->add_flag("--allow-credentials", a->allow_credentials, "let cross-origin requests send cookies and Authorization (CORS credentials)");
  cmd->callback([a] { run(*a); });
}

}  // namespace fuselm::cli
