// fuselm chat: an interactive terminal chat on the serving engine with the model's own chat
// template. Multi-line input: end a line with '\' to continue it, or put the text between lines
// of """; /clear forgets the conversation, /exit (or end of input) quits; Ctrl-C stops a reply.
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "cli/chat_renderer.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/model_args.h"

namespace fuselm::cli {
namespace {

struct ChatArgs {
  ModelArgs model;
  EngineArgs engine{1};  // one conversation: a pool of one context by default
  std::string system;
  int64_t max_tokens = 1024;
  SamplingArgs sampling{0.7f, 0, 0.95f};
};

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

// One user turn: lines until one that does not end in '\', or a """ block. nullopt at EOF.
std::optional<std::string> read_turn(bool tty) {
  if (tty) std::fputs("> ", stdout), std::fflush(stdout);
  std::string line, text;
  if (!std::getline(std::cin, line)) return std::nullopt;
  if (line == "\"\"\"") {
    while (std::getline(std::cin, line) && line != "\"\"\"") text += (text.empty() ? "" : "\n") + line;
    return text;
  }
  while (!line.empty() && line.back() == '\\') {
    line.pop_back();
    text += line + "\n";
    if (tty) std::fputs(". ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
  }
  return text + line;
}

// Streams one reply to stdout; returns its text (what the conversation keeps). Ctrl-C cancels the
// request: the flag is read after every event as well as every 100 ms without one, and nothing
// that arrives after it is printed or kept, so a reply stops within the token being printed.
std::string reply(engine::Engine& eng, engine::Request req) {
  auto stream = eng.submit(std::move(req));
  std::string text;
  engine::Event e;
  g_interrupted = false;
  bool cancelled = false;
  for (;;) {
    const bool got = stream->next(e, std::chrono::milliseconds(100));
    if (g_interrupted && !cancelled) {
      stream->cancel();
      cancelled = true;
    }
    if (!got) continue;
    if (!cancelled) {
      std::fputs(e.text.c_str(), stdout);
      std::fflush(stdout);
      text += e.text;
    }
    if (e.finished) break;
  }
  if (e.finish_reason == engine::FinishReason::error) throw std::runtime_error("generation failed: " + e.error);
  std::fputs(cancelled ? " [stopped]\n" : "\n", stdout);
  return text;
}

void run(ChatArgs& a) {
  apply_pool_sizing(a.engine, a.model);
  const std::filesystem::path dir = model_dir_of(a.model.model_dir);
  auto render = make_chat_renderer(dir);
  if (!render) throw std::runtime_error(dir.string() + ": the model has no chat template (chat_template.jinja or tokenizer_config.json); use fuselm generate");
  auto loaded = load_model(a.model);
  if (!loaded.tokenizer) throw std::runtime_error(dir.string() + ": chat needs tokenizer.json");
  engine::ModelBackend backend(*loaded.model);
  engine::Engine eng(backend, &loaded.tokenizer->tokenizer(), a.engine.options());
  eng.start();
  std::signal(SIGINT, on_sigint);
  const bool tty = isatty(0);
  std::mt19937_64 seeds(a.sampling.seed_or_random());  // one seed per reply
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  };
  reset();
  if (tty) std::fputs("fuselm chat: /clear forgets, /exit quits; end a line with \\ or use \"\"\" for several lines\n", stderr);
  while (auto turn = read_turn(tty)) {
    if (*turn == "/exit" || *turn == "/quit") break;
    if (*turn == "/clear") {
      reset();
      continue;
    }
    if (turn->empty()) continue;
    messages.push_back({{"role", "user"}, {"content", *turn}});
    engine::Request req;
    const auto ids = loaded.tokenizer->encode_rendered(render(nlohmann::ordered_json{{"messages", messages}}, true));
    req.prompt_ids.assign(ids.begin(), ids.end());
    const int64_t room = std::min(loaded.model->max_context(), eng.pool_tokens()) - static_cast<int64_t>(req.prompt_ids.size());
    if (room < 1) throw std::runtime_error("the conversation no longer fits the context; /clear it");
    req.max_tokens = std::min(a.max_tokens, room);
    req.sampling = a.sampling.params(seeds());
    messages.push_back({{"role", "assistant"}, {"content", reply(eng, std::move(req))}});
  }
  eng.shutdown(true);
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Chat with the model in the terminal (its chat template, streamed replies)");
  add_model_options(*cmd, a->model);
  add_engine_options(*cmd, a->engine);
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens per reply at most")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_sampling_options(*cmd, a->sampling, false);
  cmd->callback([a] {
    run(*a);
  });
}

}  // namespace fuselm::cli
