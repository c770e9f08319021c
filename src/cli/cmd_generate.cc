// fuselm generate: load (capturing if needed) a model and generate from a prompt, streaming text.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <limits>
#include <optional>
#include <memory>
#include <sstream>

#include "cli/chat_renderer.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/verify_stamp.h"
#include "engine/generator.h"
#include "engine/stop_matcher.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 64;
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  bool json = false;
  bool ignore_eos = false;
  bool chat = false;
  std::string logits_out;
  std::vector<std::string> stop;
  std::string prompt_file;
};

/// --chat: the model's chat template applied to the prompt as one user message with
/// add_generation_prompt, as transformers' apply_chat_template renders it (the renderer chat and
/// serve use).
std::string chat_prompt(const GenerateArgs& a) {
  const std::filesystem::path dir = model_dir_of(a.model.model_dir);
  auto render = make_chat_renderer(dir);
  if (!render)
    throw std::runtime_error(dir.string() + ": --chat needs a chat template (chat_template.jinja or tokenizer_config.json "
                             "chat_template); the model has none");
  const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", a.prompt}}});
  return render(nlohmann::ordered_json{{"messages", messages}}, true);
}

std::vector<int64_t> parse_ids(const std::string& s) {
  if (s.empty()) throw std::runtime_error("--prompt-ids is empty; give comma-separated token ids, e.g. 1,2,3");
  std::vector<int64_t> ids;
  for (size_t begin = 0; begin <= s.size();) {
    size_t end = std::min(s.find(',', begin), s.size());
    const std::string item = s.substr(begin, end - begin);
    begin = end + 1;
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw std::runtime_error("--prompt-ids: '" + item + "' is not an integer token id");
    }
  }
  return ids;
}

std::string read_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("--prompt-file " + path + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A real-valued option check that also rejects NaN (CLI::Range lets NaN through).
CLI::Validator real_in(double lo, double hi, bool lo_open) {
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(in, v) && (lo_open ? v > lo : v >= lo) && v <= hi;
        return ok ? std::string() : fmt::format("value {} is not in {}{}, {}]", in, lo_open ? "(" : "[", lo, hi);
      },
      fmt::format("in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
}

/// With --max-context, the prompt and --max-tokens must fit the KV cache it sizes: say so naming
/// the flags before any output, not when the cache runs out (generate reserves them up front).
void check_kv_fits(const GenerateArgs& a, size_t n_prompt, int64_t model_context) {
  if (a.model.max_context <= 0) return;
  const int64_t want = std::min(static_cast<int64_t>(n_prompt) + a.max_tokens, model_context);
  if (want > a.model.max_context)
    throw std::runtime_error(fmt::format("--max-context {} is too small: the prompt ({} tokens) and --max-tokens {} "
                                         "need a KV cache of {} tokens",
                                         a.model.max_context, n_prompt, a.max_tokens, want));
}

void run(const GenerateArgs& a, const std::optional<std::vector<int64_t>>& prompt_ids) {
  // Rendered before the model loads, so a template error shows at once.
  const std::string text = prompt_ids ? std::string() : a.chat ? chat_prompt(a) : a.prompt;
  auto loaded = load_model(a.model);
  hint_verify_once(loaded.dir, a.model.model_dir);
  engine::GenerateRequest req;
  if (prompt_ids) {
    req.prompt_ids = *prompt_ids;
  } else {
    if (!loaded.tokenizer) throw std::runtime_error("--prompt needs a tokenizer.json in the model directory; use --prompt-ids");
    const auto ids = a.chat ? loaded.tokenizer->encode_rendered(text) : loaded.tokenizer->encode(text);
    req.prompt_ids.assign(ids.begin(), ids.end());
  }
  req.max_tokens = a.max_tokens;
  req.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  req.stop_at_eos = !a.ignore_eos;
  engine::StopMatcher stops(a.stop);  // --stop: the text stops before the first match
  if (!a.stop.empty() && !loaded.tokenizer) throw std::runtime_error("--stop needs a tokenizer.json in the model directory");
  req.stop_requested = [&stops] { return stops.matched(); };
  std::optional<tokenizer::StreamDecoder> stop_decoder;
  if (!a.stop.empty()) stop_decoder.emplace(loaded.tokenizer->tokenizer(), true);

  check_kv_fits(a, req.prompt_ids.size(), loaded.model->max_context());  // before any output

  std::unique_ptr<tokenizer::StreamDecoder> stream;
  engine::StopMatcher shown(a.stop);  // the streamed text, cut the same way
  const bool ids_out = !loaded.tokenizer && !a.json;  // no tokenizer: the generated ids are the output
  if (loaded.tokenizer && !a.json) {
    stream = std::make_unique<tokenizer::StreamDecoder>(loaded.tokenizer->tokenizer(), true);
    if (!a.chat) std::fputs(a.prompt.c_str(), stdout);  // a chat prints only the reply
    std::fflush(stdout);
  }
  size_t res_count = 0;
  std::FILE* logits_file = nullptr;
  if (!a.logits_out.empty()) {
    logits_file = std::fopen(a.logits_out.c_str(), "wb");
    if (!logits_file) throw std::runtime_error(a.logits_out + ": cannot write");
  }
  auto res = engine::generate(
      *loaded.model, req,
      [&](int64_t tok) {
        if (stop_decoder) stops.feed(stop_decoder->step(static_cast<uint32_t>(tok)));
        if (ids_out) {
          std::printf("%s%lld", res_count++ ? "," : "", static_cast<long long>(tok));
          std::fflush(stdout);
        }
        if (!stream) return;
        std::string piece = stream->step(static_cast<uint32_t>(tok));
        if (!stops.empty()) piece = shown.feed(piece);
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      },
      [&](std::span<const float> row) {
        if (logits_file) std::fwrite(row.data(), sizeof(float), row.size(), logits_file);
      });
  if (logits_file) std::fclose(logits_file);
  if (stream) std::fputs((shown.feed(stream->flush()) + shown.flush() + "\n").c_str(), stdout);
  if (ids_out) std::fputs("\n", stdout);
  std::fflush(stdout);  // the stats line on stderr comes after the text, also when both are piped

  const size_t n = res.token_ids.size();
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = req.prompt_ids;
    j["token_ids"] = res.token_ids;
    j["logprobs"] = res.logprobs;
    j["finish_reason"] = res.finish_reason;
    if (loaded.tokenizer) {
      std::vector<uint32_t> ids(res.token_ids.begin(), res.token_ids.end());
      j["text"] = loaded.tokenizer->tokenizer().decode(ids, true);
      if (!a.stop.empty()) {  // the text before the first stop string
        engine::StopMatcher cut(a.stop);
        j["text"] = cut.feed(j["text"].get<std::string>()) + cut.flush();
      }
    } else {
      j["text"] = nullptr;
    }
    j["prefill_seconds"] = res.prefill_seconds;
    j["decode_seconds"] = res.decode_seconds;
    j["pool_allocations_after_first_decode"] = res.pool_allocations_after_first_decode;
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  const double tps = n > 1 && res.decode_seconds > 0 ? (n - 1) / res.decode_seconds : 0.0;
  std::fprintf(stderr, "fuselm: prompt %zu tokens, prefill %.3f s (%.1f tok/s); generated %zu tokens, decode %.1f tok/s (%s)\n",
               req.prompt_ids.size(), res.prefill_seconds, req.prompt_ids.size() / std::max(res.prefill_seconds, 1e-9), n,
               tps, res.finish_reason.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt (captures the model's graph on first use)");
  add_model_options(*cmd, a->model);
  auto* p = cmd->add_option("--prompt", a->prompt, "prompt text (tokenized with the model's tokenizer.json)");
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids, "prompt as comma-separated token ids, e.g. 1,2,3");
  p->excludes(ids);
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate at most")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", a->temperature, "sampling temperature; 0 = greedy")->capture_default_str()->check(real_in(0.0, 100.0, false));
  cmd->add_option("--top-k", a->top_k, "sample from the k most likely tokens; 0 = all")->capture_default_str()->check(CLI::Range(0, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--top-p", a->top_p, "nucleus sampling mass in (0, 1]")->capture_default_str()->check(real_in(0.0, 1.0, true));
  auto* seed = cmd->add_option("--seed", a->seed, "random seed for sampling (default: a random one)");
  cmd->add_option("--stop", a->stop, "stop before this text (repeatable); it is not printed")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto* pf = cmd->add_option("--prompt-file", a->prompt_file, "read the prompt text from this file");
  pf->excludes(p)->excludes(ids);
  cmd->add_flag("--json", a->json, "print one JSON object: token_ids, text, logprobs, finish_reason");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
  auto* chat = cmd->add_flag("--chat", a->chat,
                             "apply the model's chat template to --prompt as one user message (add_generation_prompt) "
                             "and print only the reply");
  chat->excludes(ids);
  cmd->add_option("--logits-out", a->logits_out,
                  "write every logits row (prompt tokens, then each decode step) as raw f32 to this file");
  cmd->callback([a, p, ids, pf, seed] {
    if (seed->count() == 0) a->seed = std::random_device{}();  // unseeded sampling is random
    if (pf->count() > 0) a->prompt = read_prompt_file(a->prompt_file);
    if (p->count() == 0 && ids->count() == 0 && pf->count() == 0)
      throw std::runtime_error("give a prompt: --prompt TEXT, --prompt-file FILE or --prompt-ids 1,2,3");
    std::optional<std::vector<int64_t>> prompt_ids;
    if (ids->count() > 0) prompt_ids = parse_ids(a->prompt_ids);  // before the model loads
    run(*a, prompt_ids);
  });
}

}  // namespace fuselm::cli
