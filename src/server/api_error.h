#pragma once
// An OpenAI-style error: the HTTP status and the body {"error": {message, type, param, code}}.
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace fuselm::server {

struct ApiError : std::runtime_error {
  int status;
  std::string param;  // the request field at fault, or empty
  ApiError(int s, const std::string& message, std::string field = {})
      : std::runtime_error(message), status(s), param(std::move(field)) {}
};

/// The error object for `status` (type from the status as OpenAI names them).
inline nlohmann::json error_body(int status, const std::string& message, const std::string& param = {}) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 503 ? "service_unavailable_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  nlohmann::json e = {{"message", message}, {"type", type}, {"code", status}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  return {{"error", e}};
}

}  // namespace fuselm::server
