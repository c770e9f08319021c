#pragma once
// What the server-side fuzz targets share: a body read as the server reads it, and the rule that
// a request reader either accepts its input or answers an HTTP 400 (server/api_error.h).
#include <nlohmann/json.hpp>

#include <string>

#include "server/api_error.h"
#include "server/request_limits.h"

namespace fuselm::fuzz {

/// Runs `read`; an ApiError other than a 400 traps (a finding), a 400 is the expected refusal.
template <class F>
void ok_or_400(F&& read) {
  try {
    read();
  } catch (const server::ApiError& e) {
    if (e.status != 400) __builtin_trap();
  }
}

/// `raw` parsed as the server does (its nesting limit), sorted and in key order; false when the
/// server would refuse the body with a 400.
inline bool parse_body(const std::string& raw, nlohmann::json& body, nlohmann::ordered_json& ordered) {
  server::RequestLimits limits;
  bool parsed = false;
  ok_or_400([&] {
    body = server::parse_request_body(raw, limits);
    ordered = server::parse_request_body_ordered(raw, limits);
    parsed = true;
  });
  return parsed;
}

}  // namespace fuselm::fuzz
