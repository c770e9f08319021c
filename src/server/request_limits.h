#pragma once
// What one HTTP request may ask of the server: body size, JSON nesting, max_tokens, and wall time.
// Each limit refused gets an OpenAI error naming the limit and the request's value (ApiError).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace fuselm::server {

struct RequestLimits {
  /// Bodies larger than this answer 413, never buffered: past a Content-Length cpp-httplib's
  /// payload limit skips the body unread; a chunked body (or one read to the end of the
  /// connection) is kept up to the cap and the rest read past (body_reader.h). 0: no limit.
  size_t max_body_bytes = size_t{32} << 20;
  /// Arrays and objects nested deeper than this answer 400 while parsing, before a deep value
  /// exists (chat messages with tool schemas nest about 10 deep).
  int max_json_depth = 64;
  /// Requests asking for more than this many new tokens answer 400; a chat request without
  /// max_tokens gets at most this many. 0: only the context bounds max_tokens.
  int64_t max_tokens = 0;
  /// Wall time of one generation request, queueing included; past it the request is cancelled and
  /// answers 504 (a stream gets an error event instead). 0: no limit.
  double timeout_s = 0;
  /// Stop strings a request may give, and the bytes of each: the stop matcher compares every
  /// held-back tail with every stop string at each token, so 10,000 strings or one of megabytes
  /// would stall a stream. More answer 400 (OpenAI's API allows 4).
  size_t max_stops = 64;
  size_t max_stop_bytes = 1024;
  /// stop_token_ids a request may give (each token is looked up in them).
  size_t max_stop_token_ids = 1024;
};

/// The request body `raw` as JSON (Json: nlohmann::json or nlohmann::ordered_json), which must be
/// an object. Throws ApiError 400 for malformed JSON, nesting past limits.max_json_depth, or a
/// value that is not an object.
nlohmann::json parse_request_body(const std::string& raw, const RequestLimits& limits);
nlohmann::ordered_json parse_request_body_ordered(const std::string& raw, const RequestLimits& limits);

/// Checks a requested max_tokens against limits.max_tokens (400 naming both) and returns the
/// default for a request that gave none: `fallback`, capped by the limit.
int64_t check_max_tokens(const RequestLimits& limits, bool given, int64_t requested, int64_t fallback);

/// Checks a request's stop strings and stop_token_ids against the limits above (400 naming the
/// field, the count or size, and the limit).
void check_stops(const RequestLimits& limits, const std::vector<std::string>& stops, size_t stop_token_ids);

/// The per-request deadline: expired() once limits.timeout_s has passed since construction.
class Deadline {
 public:
  explicit Deadline(const RequestLimits& limits);
  bool expired() const;
  /// "the request ran past the server's per-request timeout of N s".
  std::string message() const;

 private:
  double timeout_s_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fuselm::server
