#include "server/field_policy.h"

#include <fmt/core.h>

#include <array>
#include <cstdio>

#include "server/api_error.h"

namespace fuselm::server {
namespace {

using nlohmann::json;

// Endpoint masks.
constexpr unsigned kC = 1, kH = 2, kR = 4, kE = 8;
constexpr unsigned kGen = kC | kH;          // completions and chat share the sampling readers
constexpr unsigned kOut = kC | kH | kR;     // the endpoints that generate text
constexpr unsigned kAll = kC | kH | kR | kE;

unsigned bit(Endpoint e) {
  switch (e) {
    case Endpoint::completions: return kC;
    case Endpoint::chat: return kH;
    case Endpoint::responses: return kR;
    case Endpoint::embeddings: return kE;
  }
  return 0;
}

struct Rule {
  std::string_view name;
  unsigned endpoints;
  FieldKind kind;
  const char* neutral = nullptr;  // unsupported: the JSON value that changes nothing (accepted)
  const char* hint = nullptr;     // unsupported: what to use instead, or why not
};

constexpr FieldKind R = FieldKind::read, H = FieldKind::harmless, U = FieldKind::unsupported;

// Read: what the readers take (request_fields.cc, http_server.cc, responses_api.cc and the
// readers of structured output, tools, reasoning and embeddings), each of which enforces the
// field or answers 400 naming it.
constexpr Rule kRead[] = {
    {"model", kAll, R}, {"stream", kOut, R}, {"stream_options", kGen, R},
    {"max_tokens", kGen, R}, {"temperature", kOut, R}, {"top_p", kOut, R}, {"top_k", kGen, R}, {"min_p", kGen, R},
    {"presence_penalty", kGen, R}, {"frequency_penalty", kGen, R}, {"repetition_penalty", kGen, R},
    {"seed", kOut, R}, {"stop", kGen, R}, {"stop_token_ids", kGen, R}, {"ignore_eos", kGen, R},
    {"logprobs", kGen, R}, {"top_logprobs", kOut, R}, {"n", kGen, R}, {"best_of", kGen, R}, {"echo", kGen, R},
    {"logit_bias", kGen, R}, {"response_format", kGen, R}, {"guided_json", kGen, R}, {"guided_regex", kGen, R},
    {"guided_grammar", kGen, R}, {"guided_choice", kGen, R}, {"structured_outputs", kGen, R}, {"grammar", kGen, R},
    {"json_schema", kGen, R},
    {"prompt", kC, R}, {"suffix", kC, R},
    {"messages", kH, R}, {"max_completion_tokens", kH, R}, {"tools", kH | kR, R}, {"tool_choice", kH | kR, R},
    {"chat_template_kwargs", kH, R}, {"enable_thinking", kH, R},
    {"input", kR | kE, R}, {"instructions", kR, R}, {"max_output_tokens", kR, R}, {"text", kR, R},
    {"previous_response_id", kR, R}, {"store", kR, R}, {"reasoning", kR, R}, {"truncation", kR, R}, {"include", kR, R},
    {"max_tool_calls", kR, R}, {"background", kR, R}, {"prompt", kR, R}, {"conversation", kR, R},
    {"encoding_format", kE, R}, {"dimensions", kE, R}, {"normalize", kE, R}, {"min_tokens", kGen, R},
};

// Harmless: honouring them would not change a generated token or the response's content
// (bookkeeping, caching and scheduling hints; other servers' backend choice for a constraint
// fuselm enforces the same way).
constexpr Rule kHarmless[] = {
    {"user", kAll, H}, {"metadata", kAll, H}, {"store", kGen, H}, {"service_tier", kAll, H},
    {"prompt_cache_key", kAll, H}, {"safety_identifier", kAll, H}, {"request_id", kAll, H}, {"priority", kAll, H},
    {"cache_salt", kAll, H}, {"cache_prompt", kOut, H}, {"id_slot", kOut, H}, {"timings_per_token", kOut, H},
    {"guided_decoding_backend", kGen, H}, {"prediction", kH, H}, {"stream_options", kR, H},
    // Parameters of a sampler that is off unless its switch below is on (the switch is checked).
    {"mirostat_tau", kOut, H}, {"mirostat_eta", kOut, H}, {"dry_base", kOut, H}, {"dry_allowed_length", kOut, H},
    {"dry_penalty_last_n", kOut, H}, {"dry_sequence_breakers", kOut, H}, {"xtc_threshold", kOut, H},
    {"dynatemp_exponent", kOut, H},
};

// Unsupported: honouring them would change the output; accepted only at their neutral value.
constexpr Rule kUnsupported[] = {
    // Fields of the OpenAI/vLLM shape that no reader takes yet: refused, never ignored.
    {"parallel_tool_calls", kH | kR, U, "true", "a reply may hold several tool calls"},
    {"add_generation_prompt", kH, U, "true", "chat always ends the prompt with the assistant's turn; use /v1/completions with /apply-template's text"},
    // vLLM's extra parameters.
    {"use_beam_search", kOut, U, "false", "beam search is not supported"},
    {"length_penalty", kOut, U, "1", "it applies to beam search, which is not supported"},
    {"truncate_prompt_tokens", kAll, U, nullptr, "prompts are never truncated; shorten the prompt"},
    {"include_stop_str_in_output", kOut, U, "false"},
    {"skip_special_tokens", kOut, U, "true"},
    {"spaces_between_special_tokens", kOut, U, "true"},
    {"bad_words", kOut, U, "[]"},
    {"allowed_token_ids", kOut, U},
    {"prompt_logprobs", kOut, U, nullptr, "use 'echo' with 'logprobs' on /v1/completions"},
    {"logits_processors", kOut, U},
    {"return_tokens_as_token_ids", kOut, U, "false"},
    {"add_special_tokens", kOut, U},
    {"continue_final_message", kOut, U, "false"},
    {"documents", kOut, U},
    {"chat_template", kOut, U, nullptr, "the model's own template is used"},
    {"guided_whitespace_pattern", kOut, U},
    // OpenAI fields fuselm does not have.
    {"reasoning_effort", kH, U, nullptr, "use 'chat_template_kwargs' if the template reads it"},
    {"verbosity", kH, U},
    {"modalities", kH, U, "[\"text\"]", "only text output is supported"},
    {"audio", kH, U, nullptr, "only text output is supported"},
    {"web_search_options", kH, U},
    {"functions", kH, U, "[]", "use 'tools'"},
    {"function_call", kH, U, nullptr, "use 'tool_choice'"},
    // llama-server's /completion fields.
    {"n_predict", kOut, U, nullptr, "use 'max_tokens'"},
    {"repeat_penalty", kOut, U, "1", "use 'repetition_penalty'"},
    {"repeat_last_n", kOut, U},
    {"penalize_nl", kOut, U, "false"},
    {"typical_p", kOut, U, "1"},
    {"tfs_z", kOut, U, "1"},
    {"mirostat", kOut, U, "0"},
    {"dry_multiplier", kOut, U, "0"},
    {"xtc_probability", kOut, U, "0"},
    {"top_n_sigma", kOut, U, "-1"},
    {"dynatemp_range", kOut, U, "0"},
    {"min_keep", kOut, U, "0"},
    {"samplers", kOut, U},
    {"n_probs", kOut, U, "0", "use 'logprobs' and 'top_logprobs'"},
    {"post_sampling_probs", kOut, U, "false"},
    {"t_max_predict_ms", kOut, U, "0"},
    {"image_data", kOut, U, "[]", "image input is not supported"},
    {"multimodal_data", kOut, U, "[]", "image and audio input are not supported"},
    {"lora", kOut, U, "[]"},
    {"grammar_lazy", kOut, U, "false"},
    {"grammar_triggers", kOut, U, "[]"},
    {"preserved_tokens", kOut, U, "[]"},
    {"response_fields", kOut, U},
    {"return_tokens", kOut, U, "false"},
    {"n_indent", kOut, U, "0"},
};

template <size_t N>
const Rule* find_in(const Rule (&list)[N], unsigned endpoint_bit, std::string_view name) {
  for (const Rule& r : list)
    if (r.name == name && (r.endpoints & endpoint_bit)) return &r;
  return nullptr;
}

const Rule* find_rule(Endpoint e, std::string_view name) {
  const unsigned b = bit(e);
  // Read wins over the other lists (a field read by one endpoint may be harmless at another).
  if (const Rule* r = find_in(kRead, b, name)) return r;
  if (const Rule* r = find_in(kHarmless, b, name)) return r;
  return find_in(kUnsupported, b, name);
}

bool is_neutral(const Rule& r, const json& value) {
  if (value.is_null()) return true;
  return r.neutral && json::parse(r.neutral) == value;
}

}  // namespace

std::string_view endpoint_path(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::completions: return "/v1/completions";
    case Endpoint::chat: return "/v1/chat/completions";
    case Endpoint::responses: return "/v1/responses";
    case Endpoint::embeddings: return "/v1/embeddings";
  }
  return "";
}

FieldKind classify_field(Endpoint endpoint, std::string_view name) {
  const Rule* r = find_rule(endpoint, name);
  return r ? r->kind : FieldKind::unknown;
}

void UnknownFieldLog::note(std::string_view endpoint, std::string_view name) {
  std::string line;
  {
    std::lock_guard lock(mu_);
    if (full_ || seen_.count(name)) return;
    if (seen_.size() >= max_) {
      full_ = true;
      line = fmt::format("fuselm: {} unknown request fields logged; further ones are accepted without a log line", max_);
    } else {
      seen_.emplace(name);
      // JSON-quoted (a name may hold control characters) and cut, so a hostile name cannot forge log lines.
      const std::string shown = json(std::string(name.substr(0, 80))).dump(-1, ' ', true, json::error_handler_t::replace);
      line = fmt::format("fuselm: request field {} on {} is not one fuselm knows; ignored (logged once per name)", shown, endpoint);
    }
  }
  sink_(line);
}

UnknownFieldLog& stderr_unknown_field_log() {
  static UnknownFieldLog log([](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  return log;
}

void check_fields(const json& body, Endpoint endpoint, UnknownFieldLog& log) {
  if (!body.is_object()) return;
  for (const auto& [name, value] : body.items()) {
    const Rule* r = find_rule(endpoint, name);
    if (!r) {
      log.note(endpoint_path(endpoint), name);
      continue;
    }
    if (r->kind != FieldKind::unsupported || is_neutral(*r, value)) continue;
    std::string msg = fmt::format("'{}' is not supported by fuselm", name);
    if (r->neutral) msg += fmt::format(" (only {} is accepted)", r->neutral);
    if (r->hint) msg += fmt::format(": {}", r->hint);
    throw ApiError(400, msg, name);
  }
}

}  // namespace fuselm::server
