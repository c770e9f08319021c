// fuselm generate: load (capturing if needed) a model and generate from a prompt, streaming text.
// The request runs on the serving engine (engine/generator.h), the loop `fuselm serve` runs.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <memory>
#include <sstream>
#include <functional>
#include <span>

#include "cli/chat_renderer.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/model_args.h"
#include "cli/speculative_args.h"
#include "cli/verify_stamp.h"
#include "engine/generator.h"
#include "engine/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 64;
  SamplingArgs sampling;
  bool json = false;
  bool ignore_eos = false;
  bool chat = false;
  std::string logits_out;
  std::vector<std::string> stop;
  std::string prompt_file;
  std::string kv_cache_dtype = "f32";
  SpeculativeArgs speculative;
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

// The request from the flags and the prompt (ids, or text tokenized as given or chat-rendered).
engine::GenerateRequest make_request(const GenerateArgs& a, const LoadedModel& loaded, const std::string& text,
                                     const std::optional<std::vector<int64_t>>& prompt_ids) {
  engine::GenerateRequest req;
  if (prompt_ids) {
    req.prompt_ids = *prompt_ids;
  } else {
    if (!loaded.tokenizer) throw std::runtime_error("--prompt needs a tokenizer.json in the model directory; use --prompt-ids");
    const auto ids = a.chat ? loaded.tokenizer->encode_rendered(text) : loaded.tokenizer->encode(text);
    req.prompt_ids.assign(ids.begin(), ids.end());
  }
  req.max_tokens = a.max_tokens;
  req.sampling = a.sampling.params(a.sampling.seed_or_random());
  req.stop_at_eos = !a.ignore_eos;
  if (!a.stop.empty() && !loaded.tokenizer) throw std::runtime_error("--stop needs a tokenizer.json in the model directory");
  req.stop = a.stop;  // the text stops before the first match (the engine's stop strings)
  if (loaded.tokenizer) req.tokenizer = &loaded.tokenizer->tokenizer();
  return req;
}

// --json: one object; the text is the generated ids decoded whole, cut before a stop string.
void print_json(const GenerateArgs& a, const LoadedModel& loaded, const engine::GenerateRequest& req,
                const engine::GenerateResult& res) {
  nlohmann::json j;
  j["prompt_ids"] = req.prompt_ids;
  j["token_ids"] = res.token_ids;
  j["logprobs"] = res.logprobs;
  j["finish_reason"] = engine::openai_name(res.finish_reason);
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
  if (a.speculative.enabled())
    j["speculative"] = {{"drafts", res.spec_drafts}, {"draft_tokens", res.spec_draft_tokens}, {"accepted_tokens", res.spec_accepted_tokens}};
  j["pool_allocations_after_first_decode"] = res.pool_allocations_after_first_decode;
  std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void run(const GenerateArgs& a, const std::optional<std::vector<int64_t>>& prompt_ids) {
  // Rendered before the model loads, so a template error shows at once.
  const std::string text = prompt_ids ? std::string() : a.chat ? chat_prompt(a) : a.prompt;
  auto loaded = load_model(a.model);
  hint_verify_once(loaded.dir, a.model.model_dir);
  engine::GenerateRequest req = make_request(a, loaded, text, prompt_ids);
  check_kv_fits(a, req.prompt_ids.size(), loaded.model->max_context());  // before any output
  const Speculation spec = setup_speculation(a.speculative, *loaded.model, a.model);
  req.speculative = spec.options;

  const bool text_out = loaded.tokenizer && !a.json;  // the engine's streamed text is the output
  const bool ids_out = !loaded.tokenizer && !a.json;  // no tokenizer: the generated ids are the output
  if (text_out) {
    if (!a.chat) std::fputs(a.prompt.c_str(), stdout);  // a chat prints only the reply
    std::fflush(stdout);
  }
  size_t res_count = 0;
  std::FILE* logits_file = nullptr;
  if (!a.logits_out.empty()) {
    logits_file = std::fopen(a.logits_out.c_str(), "wb");
    if (!logits_file) throw std::runtime_error(a.logits_out + ": cannot write");
  }
  std::function<void(std::span<const float>)> on_logits;
  if (logits_file)
    on_logits = [logits_file](std::span<const float> row) { std::fwrite(row.data(), sizeof(float), row.size(), logits_file); };
  const auto res = engine::generate(*loaded.model, req, [&](const engine::Event& e) {
    for (const auto& t : e.tokens)
      if (ids_out) std::printf("%s%lld", res_count++ ? "," : "", static_cast<long long>(t.id));
    if (text_out) std::fputs(e.text.c_str(), stdout);
    std::fflush(stdout);
  }, on_logits);
  if (logits_file) std::fclose(logits_file);
  if (text_out || ids_out) std::fputs("\n", stdout);
  std::fflush(stdout);  // the stats line on stderr comes after the text, also when both are piped

  if (a.json) print_json(a, loaded, req, res);
  const size_t n = res.token_ids.size();
  const double tps = n > 1 && res.decode_seconds > 0 ? (n - 1) / res.decode_seconds : 0.0;
  std::fprintf(stderr, "fuselm: prompt %zu tokens, prefill %.3f s (%.1f tok/s); generated %zu tokens, decode %.1f tok/s (%s)\n",
               req.prompt_ids.size(), res.prefill_seconds, req.prompt_ids.size() / std::max(res.prefill_seconds, 1e-9), n,
               tps, engine::openai_name(res.finish_reason));
  if (res.spec_drafts > 0)
    std::fprintf(stderr, "fuselm: speculative %s: %lld drafted, %lld accepted (acceptance %.3f), mean accepted length %.2f tokens per verification\n",
                 describe(a.speculative).c_str(), static_cast<long long>(res.spec_draft_tokens),
                 static_cast<long long>(res.spec_accepted_tokens),
                 static_cast<double>(res.spec_accepted_tokens) / static_cast<double>(res.spec_draft_tokens),
                 static_cast<double>(res.spec_accepted_tokens + res.spec_drafts) / static_cast<double>(res.spec_drafts));
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
  add_sampling_options(*cmd, a->sampling, true);
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
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype, "KV cache storage: f32, bf16 or q8_0 (as fuselm serve)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16", "q8_0"}));
  add_speculative_options(*cmd, a->speculative);
  cmd->callback([a, p, ids, pf] {
    if (a->speculative.enabled() && !a->logits_out.empty())
      throw std::runtime_error("--logits-out writes one row per decode step; it does not combine with --speculative-method");
    a->model.kv_dtype = kv::parse_kv_dtype(a->kv_cache_dtype);
    if (pf->count() > 0) a->prompt = read_prompt_file(a->prompt_file);
    if (p->count() == 0 && ids->count() == 0 && pf->count() == 0)
      throw std::runtime_error("give a prompt: --prompt TEXT, --prompt-file FILE or --prompt-ids 1,2,3");
    std::optional<std::vector<int64_t>> prompt_ids;
    if (ids->count() > 0) prompt_ids = parse_ids(a->prompt_ids);  // before the model loads
    run(*a, prompt_ids);
  });
}

}  // namespace fuselm::cli
