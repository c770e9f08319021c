#include "server/cors.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "server/api_error.h"

namespace fuselm::server {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    if (auto item = trim(s.substr(at, end - at)); !item.empty()) out.push_back(item);
    at = end + 1;
  }
  return out;
}

bool has(const std::vector<std::string>& list, const std::string& x) { return std::find(list.begin(), list.end(), x) != list.end(); }

bool wildcard(const std::vector<std::string>& list) { return has(list, "*"); }

// The methods fuselm's routes answer ("*" in --allowed-methods stands for these).
constexpr const char* kServerMethods = "GET, POST, OPTIONS";

bool method_allowed(const CorsConfig& cfg, const std::string& method) {
  if (wildcard(cfg.allowed_methods)) return method == "GET" || method == "POST" || method == "OPTIONS" || method == "HEAD";
  return std::any_of(cfg.allowed_methods.begin(), cfg.allowed_methods.end(),
                     [&](const std::string& m) { return lower(m) == lower(method); });
}

bool headers_allowed(const CorsConfig& cfg, const std::string& requested) {
  if (wildcard(cfg.allowed_headers)) return true;
  for (const auto& h : split_commas(requested)) {
    const bool ok = std::any_of(cfg.allowed_headers.begin(), cfg.allowed_headers.end(),
                                [&](const std::string& a) { return lower(a) == lower(h); });
    if (!ok) return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> parse_list_flag(const std::string& flag, const std::string& value) {
  const std::string t = trim(value);
  if (t.empty() || t.front() != '[') return split_commas(t);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(t);
  } catch (const std::exception&) {
    throw std::runtime_error(flag + ": '" + value + "' is neither a JSON list of strings nor a comma-separated list");
  }
  std::vector<std::string> out;
  for (const auto& x : j) {
    if (!x.is_string()) throw std::runtime_error(flag + ": the JSON list must hold strings");
    if (auto item = trim(x.get<std::string>()); !item.empty()) out.push_back(item);
  }
  return out;
}

bool origin_allowed(const CorsConfig& cfg, const std::string& origin) {
  return cfg.enabled() && !origin.empty() && (wildcard(cfg.allowed_origins) || has(cfg.allowed_origins, origin));
}

HeaderList cors_response_headers(const CorsConfig& cfg, const std::string& origin) {
  if (!origin_allowed(cfg, origin)) return {};
  // A wildcard may not be combined with credentials (the Fetch standard): echo the origin then.
  if (wildcard(cfg.allowed_origins) && !cfg.allow_credentials) return {{"Access-Control-Allow-Origin", "*"}};
  HeaderList h = {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
  if (cfg.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  return h;
}

HeaderList cors_preflight_headers(const CorsConfig& cfg, const std::string& origin, const std::string& request_method,
                                  const std::string& request_headers) {
  if (!origin_allowed(cfg, origin) || !method_allowed(cfg, request_method) || !headers_allowed(cfg, request_headers))
    return {};
  HeaderList h = cors_response_headers(cfg, origin);
  h.emplace_back("Access-Control-Allow-Methods", wildcard(cfg.allowed_methods) ? kServerMethods : join(cfg.allowed_methods));
  // "*" echoes what was asked for: a literal "*" is not a wildcard when credentials are included.
  const std::string allow_headers = wildcard(cfg.allowed_headers) ? request_headers : join(cfg.allowed_headers);
  if (!allow_headers.empty()) h.emplace_back("Access-Control-Allow-Headers", allow_headers);
  h.emplace_back("Access-Control-Max-Age", "600");
  return h;
}

void install_cors(httplib::Server& svr, const CorsConfig& cfg) {
  svr.Options(R"(.*)", [cfg](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    const std::string method = req.get_header_value("Access-Control-Request-Method");
    res.set_header("Allow", kServerMethods);
    if (origin.empty() || method.empty()) {  // a plain OPTIONS, not a preflight
      res.status = 204;
      return;
    }
    const HeaderList h = cors_preflight_headers(cfg, origin, method, req.get_header_value("Access-Control-Request-Headers"));
    if (h.empty()) {
      res.status = 403;
      const std::string why = cfg.enabled() ? "this cross-origin request is not allowed (--allowed-origins, --allowed-methods, --allowed-headers)"
                                            : "cross-origin requests are not enabled on this server (--allowed-origins)";
      res.set_content(error_body(403, why).dump(), "application/json");
      return;
    }
    for (const auto& [k, v] : h) res.set_header(k, v);
    res.status = 204;
  });
  if (!cfg.enabled()) return;
  svr.set_post_routing_handler([cfg](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS" || res.has_header("Access-Control-Allow-Origin")) return;
    for (const auto& [k, v] : cors_response_headers(cfg, req.get_header_value("Origin"))) res.set_header(k, v);
  });
}

}  // namespace fuselm::server
