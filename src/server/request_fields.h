#pragma once
// Reading OpenAI request fields with their types and ranges checked: each failure is an ApiError
// 400 naming the field.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "server/api_error.h"

namespace fuselm::server {

/// The optional field `name` of `body` as a number in [lo, hi] (null counts as absent).
std::optional<double> get_number(const nlohmann::json& body, const char* name, double lo, double hi);
/// The optional number field `r.name` inside `r` (the shared sampling bounds).
std::optional<double> get_number(const nlohmann::json& body, const engine::ParamRange& r);
/// The optional integer field `name` in [lo, hi].
std::optional<int64_t> get_int(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi);
std::optional<bool> get_bool(const nlohmann::json& body, const char* name);
std::optional<std::string> get_string(const nlohmann::json& body, const char* name);

/// What both endpoints share: sampling, stops, limits, streaming, plus the checks that refuse
/// fields fuselm knows but does not support (best_of > 1, suffix).
struct CommonFields {
  engine::Request request;
  int64_t n = 1;  // choices per prompt
  bool max_tokens_given = false;
  bool stream = false, include_usage = false;
};

/// Reads the common fields of a completions or chat body; `chat` picks the logprobs form
/// (bool + top_logprobs for chat, an integer for completions). `random_seed` seeds unseeded
/// requests. Throws ApiError.
CommonFields read_common(const nlohmann::json& body, bool chat, uint64_t random_seed);

/// Choices per prompt a request may ask for ('n').
inline constexpr int64_t max_choices = 128;

}  // namespace fuselm::server
