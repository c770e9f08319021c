#include "server/request_limits.h"

#include <fmt/core.h>

#include "base/json_limited.h"

namespace fuselm::server {
namespace {

template <class Json>
Json parse_body_as(const std::string& raw, const RequestLimits& limits) {
  Json body;
  try {
    body = base::parse_json_limited_as<Json>(raw, limits.max_json_depth);
  } catch (const base::JsonTooDeep&) {
    throw ApiError(400, fmt::format("the request body nests JSON deeper than {} levels", limits.max_json_depth));
  } catch (const nlohmann::json::parse_error& e) {
    throw ApiError(400, std::string("malformed JSON in the request body: ") + e.what());
  } catch (const nlohmann::json::out_of_range& e) {  // a number past double's range (1e400): 406
    throw ApiError(400, std::string("a number in the request body is out of range: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return body;
}

}  // namespace

nlohmann::json parse_request_body(const std::string& raw, const RequestLimits& limits) {
  return parse_body_as<nlohmann::json>(raw, limits);
}

nlohmann::ordered_json parse_request_body_ordered(const std::string& raw, const RequestLimits& limits) {
  return parse_body_as<nlohmann::ordered_json>(raw, limits);
}

int64_t check_max_tokens(const RequestLimits& limits, bool given, int64_t requested, int64_t fallback) {
  if (limits.max_tokens <= 0) return given ? requested : fallback;
  if (given && requested > limits.max_tokens)
    throw ApiError(400, fmt::format("max_tokens ({}) is more than this server allows per request ({}; --max-tokens-limit)",
                                    requested, limits.max_tokens), "max_tokens");
  return given ? requested : std::min(fallback, limits.max_tokens);
}

void check_stops(const RequestLimits& limits, const std::vector<std::string>& stops, size_t stop_token_ids) {
  if (stops.size() > limits.max_stops)
    throw ApiError(400, fmt::format("'stop' has {} strings, more than this server allows ({})", stops.size(), limits.max_stops),
                   "stop");
  for (const auto& s : stops)
    if (s.size() > limits.max_stop_bytes)
      throw ApiError(400, fmt::format("a 'stop' string has {} bytes, more than this server allows ({})", s.size(),
                                      limits.max_stop_bytes), "stop");
  if (stop_token_ids > limits.max_stop_token_ids)
    throw ApiError(400, fmt::format("'stop_token_ids' has {} ids, more than this server allows ({})", stop_token_ids,
                                    limits.max_stop_token_ids), "stop_token_ids");
}

Deadline::Deadline(const RequestLimits& limits) : timeout_s_(limits.timeout_s), start_(std::chrono::steady_clock::now()) {}

bool Deadline::expired() const {
  if (timeout_s_ <= 0) return false;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > timeout_s_;
}

std::string Deadline::message() const {
  return fmt::format("the request ran past the server's per-request timeout of {} s (--request-timeout)", timeout_s_);
}

}  // namespace fuselm::server
