// libFuzzer target: the body of an HTTP request to any endpoint of `fuselm serve`, read as the
// server reads it (no sockets): the JSON with the server's nesting limit, then the fields of
// /v1/completions and /v1/chat/completions (read_common), and the fields /tokenize, /detokenize
// and /apply-template look at, with a message's content parts joined (join_text_parts). Every body is read or refused with ApiError (an HTTP 4xx);
// anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "request_body.h"
#include "server/chat_content.h"
#include "server/request_fields.h"
#include "server/request_limits.h"

namespace {

using fuselm::server::ApiError;

void read_other_endpoints(const nlohmann::json& body) {
  try { (void)fuselm::server::get_string(body, "model"); } catch (const ApiError&) {}
  try { (void)fuselm::server::get_bool(body, "add_special_tokens"); } catch (const ApiError&) {}
  try { (void)fuselm::server::get_bool(body, "add_generation_prompt"); } catch (const ApiError&) {}
  try { (void)fuselm::server::get_string(body, "prompt"); } catch (const ApiError&) {}
  try { (void)fuselm::server::get_string(body, "content"); } catch (const ApiError&) {}
  try { (void)fuselm::server::get_number(body, "temperature", 0, 2); } catch (const ApiError&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  fuselm::server::RequestLimits limits;
  nlohmann::json body;
  nlohmann::ordered_json ordered;
  if (!fuselm::fuzz::parse_body(raw, body, ordered)) return 0;
  fuselm::fuzz::ok_or_400([&] { fuselm::server::join_text_parts(ordered); });
  for (bool chat : {false, true}) {
    fuselm::fuzz::ok_or_400([&] {
      const auto c = fuselm::server::read_common(body, chat, 1234);
      if (c.request.max_tokens < 1) __builtin_trap();  // read_common admits only max_tokens >= 1
      (void)fuselm::server::check_max_tokens(limits, c.max_tokens_given, c.request.max_tokens, 16);
    });
  }
  read_other_endpoints(body);
  return 0;
}
