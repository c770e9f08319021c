#include "server/request_fields.h"

#include <fmt/core.h>

#include <cmath>
#include <limits>

namespace fuselm::server {
namespace {

const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

std::optional<double> get_number(const nlohmann::json& body, const char* name, double lo, double hi) {
  const auto* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw ApiError(400, fmt::format("'{}' must be a number", name), name);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) throw ApiError(400, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
  return x;
}

std::optional<int64_t> get_int(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi) {
  const auto* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw ApiError(400, fmt::format("'{}' must be an integer", name), name);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw ApiError(400, fmt::format("'{}' is out of range", name), name);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) throw ApiError(400, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
  return x;
}

std::optional<double> get_number(const nlohmann::json& body, const engine::ParamRange& r) {
  const auto* v = field(body, r.name.data());
  if (!v) return std::nullopt;
  if (!v->is_number()) throw ApiError(400, fmt::format("'{}' must be a number", r.name), std::string(r.name));
  const double x = v->get<double>();
  if (!r.contains(x)) throw ApiError(400, fmt::format("'{}' must be in {}, got {}", r.name, r.interval(), x), std::string(r.name));
  return x;
}

std::optional<bool> get_bool(const nlohmann::json& body, const char* name) {
  const auto* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", name), name);
  return v->get<bool>();
}

std::optional<std::string> get_string(const nlohmann::json& body, const char* name) {
  const auto* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw ApiError(400, fmt::format("'{}' must be a string", name), name);
  return v->get<std::string>();
}

namespace {

void read_unsupported(const nlohmann::json& body) {
  if (auto b = get_int(body, "best_of", 1, max_choices); b && *b != 1)
    throw ApiError(400, "'best_of' > 1 is not supported (use 'n' for several choices)", "best_of");
  if (get_bool(body, "echo").value_or(false)) throw ApiError(400, "'echo' is not supported", "echo");
  if (const auto* s = field(body, "suffix")) throw ApiError(400, "'suffix' is not supported", "suffix");
  if (const auto* lb = field(body, "logit_bias"); lb && !lb->empty())
    throw ApiError(400, "'logit_bias' is not supported", "logit_bias");
  if (const auto* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw ApiError(400, "'response_format' must be an object with a string 'type'", "response_format");
    if ((*rf)["type"] != "text")
      throw ApiError(400, fmt::format("'response_format' of type '{}' is not supported (fuselm cannot constrain output)",
                                      (*rf)["type"].get<std::string>()), "response_format");
  }
}

void read_stops(const nlohmann::json& body, engine::Request& r) {
  if (const auto* s = field(body, "stop")) {
    if (s->is_string()) r.stop.push_back(s->get<std::string>());
    else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) throw ApiError(400, "'stop' must be a string or an array of strings", "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw ApiError(400, "'stop' must be a string or an array of strings", "stop");
    }
  }
  if (const auto* s = field(body, "stop_token_ids")) {
    if (!s->is_array()) throw ApiError(400, "'stop_token_ids' must be an array of integers", "stop_token_ids");
    for (const auto& x : *s) {
      if (!x.is_number_integer()) throw ApiError(400, "'stop_token_ids' must be an array of integers", "stop_token_ids");
      r.stop_token_ids.push_back(x.get<int64_t>());
    }
  }
}

// The sampling fields, each checked against engine::sampling_range (the bounds chat and generate
// apply too).
void read_sampling(const nlohmann::json& body, engine::SamplingParams& p, uint64_t random_seed) {
  namespace R = engine::sampling_range;
  p.temperature = static_cast<float>(get_number(body, R::temperature).value_or(1.0));
  p.top_p = static_cast<float>(get_number(body, R::top_p).value_or(1.0));
  // -1 is vLLM's "all tokens", as 0 is.
  p.top_k = static_cast<int32_t>(std::max<int64_t>(0, get_int(body, "top_k", -1, static_cast<int64_t>(R::top_k.hi)).value_or(0)));
  p.min_p = static_cast<float>(get_number(body, R::min_p).value_or(0));
  p.presence_penalty = static_cast<float>(get_number(body, R::presence_penalty).value_or(0));
  p.frequency_penalty = static_cast<float>(get_number(body, R::frequency_penalty).value_or(0));
  p.repetition_penalty = static_cast<float>(get_number(body, R::repetition_penalty).value_or(1));
  if (auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    p.seed = engine::seed_from_int(*seed);
  else
    p.seed = random_seed;
}

}  // namespace

CommonFields read_common(const nlohmann::json& body, bool chat, uint64_t random_seed) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  read_unsupported(body);
  CommonFields c;
  auto& r = c.request;
  auto& p = r.sampling;
  constexpr int64_t big = int64_t{1} << 40;
  auto mt = get_int(body, "max_tokens", 1, big);
  const auto top_logprobs_lo = static_cast<int64_t>(engine::sampling_range::top_logprobs.lo);
  const auto top_logprobs_hi = static_cast<int64_t>(engine::sampling_range::top_logprobs.hi);
  if (chat) {
    if (auto mct = get_int(body, "max_completion_tokens", 1, big)) mt = mct;
  }
  c.max_tokens_given = mt.has_value();
  c.n = get_int(body, "n", 1, max_choices).value_or(1);
  r.max_tokens = mt.value_or(16);
  read_sampling(body, p, random_seed);
  read_stops(body, r);
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  if (chat) {
    r.logprobs = get_bool(body, "logprobs").value_or(false);
    p.top_logprobs = static_cast<int32_t>(get_int(body, "top_logprobs", top_logprobs_lo, top_logprobs_hi).value_or(0));
    if (p.top_logprobs > 0 && !r.logprobs) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else if (auto lp = get_int(body, "logprobs", top_logprobs_lo, top_logprobs_hi)) {
    r.logprobs = true;
    p.top_logprobs = static_cast<int32_t>(*lp);
  }
  c.stream = get_bool(body, "stream").value_or(false);
  if (const auto* so = field(body, "stream_options")) {
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    if (!c.stream) throw ApiError(400, "'stream_options' needs 'stream': true", "stream_options");
    c.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  return c;
}

}  // namespace fuselm::server
