// The grammar side of bench/grammar_conformance.py: for each input line {"schema": S, "instances":
// [text, ...]} it builds Grammar::json_schema(S, strict = false) (JSON Schema's own semantics, as
// the server's guided_json) on a vocabulary of the 256 single bytes, feeds each instance's text
// byte by byte and then the stop token, and writes one line {"status": "ok", "accepted": [bool,
// ...]}, or {"status": "refused", "keyword": K, "pointer": P} (UnsupportedSchemaError), or
// {"status": "error", "message": M} (GrammarError: an invalid or unsatisfiable schema).
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace {

using fuselm::grammar::Compiler;
using fuselm::grammar::Grammar;
using fuselm::grammar::Matcher;

bool accepts(Compiler& c, const Grammar& g, const std::string& text) {
  Matcher m(c.compile(g));
  for (unsigned char ch : text)
    if (!m.accept(ch)) return false;
  return m.accept(256) && m.terminated();
}

nlohmann::json check(Compiler& c, const nlohmann::json& in) {
  try {
    Grammar g = Grammar::json_schema(nlohmann::ordered_json::parse(in.at("schema").dump()), /*strict=*/false);
    nlohmann::json accepted = nlohmann::json::array();
    for (const auto& text : in.at("instances")) accepted.push_back(accepts(c, g, text.get<std::string>()));
    return {{"status", "ok"}, {"accepted", accepted}};
  } catch (const fuselm::grammar::UnsupportedSchemaError& e) {
    return {{"status", "refused"}, {"keyword", e.keyword()}, {"pointer", e.pointer()}};
  } catch (const fuselm::grammar::GrammarError& e) {
    return {{"status", "error"}, {"message", e.what()}};
  }
}

}  // namespace

int main() {
  fuselm::grammar::Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.size = 257;
  v.stop_ids = {256};
  Compiler c(v);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << check(c, nlohmann::json::parse(line)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  }
  return 0;
}
