#pragma once
// Cross-origin resource sharing (the Fetch standard's CORS protocol), configured as vLLM's
// --allowed-origins, --allowed-methods, --allowed-headers and --allow-credentials (Starlette's
// CORSMiddleware): with no allowed origins the server sends no CORS headers at all (as before).
// A browser front-end on another origin first sends a preflight OPTIONS; it is answered on every
// path, before the API-key check (a preflight carries no credentials by definition).
#include <string>
#include <utility>
#include <vector>

namespace httplib {
class Server;
}  // namespace httplib

namespace fuselm::server {

struct CorsConfig {
  std::vector<std::string> allowed_origins;             // "*" allows every origin; empty: CORS off
  std::vector<std::string> allowed_methods{"*"};        // "*": every method the server has
  std::vector<std::string> allowed_headers{"*"};        // "*": whatever the preflight asks for
  bool allow_credentials = false;
  bool enabled() const { return !allowed_origins.empty(); }
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// A list flag's value as vLLM takes it: a JSON array of strings (["http://a", "http://b"]) or a
/// comma-separated list (blanks trimmed, empty items dropped). Throws std::runtime_error naming
/// `flag` for a JSON value that is not an array of strings.
std::vector<std::string> parse_list_flag(const std::string& flag, const std::string& value);

/// Whether `origin` (the request's Origin header) may read responses: "*" or an exact match.
bool origin_allowed(const CorsConfig& cfg, const std::string& origin);

/// Headers for an actual (non-preflight) response to a request from `origin`: empty when CORS is
/// off, the request has no Origin, or the origin is not allowed. Access-Control-Allow-Origin is
/// "*" for a wildcard without credentials, else the origin itself (with Vary: Origin).
HeaderList cors_response_headers(const CorsConfig& cfg, const std::string& origin);

/// Headers for a preflight from `origin` asking for `request_method` and `request_headers`
/// (Access-Control-Request-Method / -Headers): empty when not allowed (the origin, or a method
/// outside allowed_methods, or a header outside allowed_headers). Allowed: Allow-Origin,
/// Allow-Methods, Allow-Headers, Max-Age and, with credentials, Allow-Credentials.
HeaderList cors_preflight_headers(const CorsConfig& cfg, const std::string& origin, const std::string& request_method,
                                  const std::string& request_headers);

/// Answers OPTIONS on every path (204; 403 with an error body and no CORS headers for a preflight
/// that is not allowed) and adds cors_response_headers to every other response, errors and
/// event streams included (a post-routing handler: it runs before the headers are written). Does
/// nothing to responses when CORS is off, but OPTIONS is still answered (204, Allow header).
void install_cors(httplib::Server& svr, const CorsConfig& cfg);

}  // namespace fuselm::server
