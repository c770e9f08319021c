// libFuzzer target: the constraint a request may carry (server/structured_output.h's fields),
// from the grammar's side: the first byte picks a JSON Schema (read with the server's nesting
// limit), a regular expression or an EBNF grammar; the rest is that text. It is built, compiled
// for a small byte vocabulary and walked for a few tokens. Bad input must end in GrammarError (an
// HTTP 400 on the server) or a depth-limited JSON error; a crash, a sanitizer report, another
// exception or a hang (libFuzzer's -timeout) is a finding. Compiling a pathological grammar is
// where a hang would show.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/request_limits.h"

namespace {

using fuselm::grammar::Grammar;

// Every single byte as a token, a few multi-byte JSON tokens, and a stop id.
fuselm::grammar::Compiler& compiler() {
  static fuselm::grammar::Compiler c([] {
    fuselm::grammar::Vocabulary v;
    for (int b = 0; b < 256; ++b) v.token_bytes.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"\": ", ", \"", "true", "false", "null", "{\"", "\"}", "[]", "{}"}) v.token_bytes.emplace_back(t);
    v.token_bytes.emplace_back();  // the stop token: special, no text
    v.size = static_cast<int32_t>(v.token_bytes.size());
    v.stop_ids = {v.size - 1};
    return v;
  }());
  return c;
}

Grammar build(uint8_t mode, const std::string& text) {
  switch (mode % 3) {
    case 0: {
      fuselm::server::RequestLimits limits;
      const auto schema = fuselm::server::parse_request_body_ordered(text, limits);
      return Grammar::json_schema(schema, (mode & 4) != 0);
    }
    case 1: return Grammar::regex(text);
    default: return Grammar::ebnf(text);
  }
}

// Takes the lowest allowed token at each step: the matcher must always allow something until it
// terminates, and accept what it allowed.
void walk(const Grammar& g) {
  fuselm::grammar::Matcher m(compiler().compile(g));
  std::vector<int32_t> mask(fuselm::grammar::bitmask_words(m.vocab_size()));
  for (int step = 0; step < 64 && !m.terminated(); ++step) {
    m.fill_bitmask(mask);
    int32_t next = -1;
    for (int32_t id = 0; id < m.vocab_size() && next < 0; ++id)
      if ((static_cast<uint32_t>(mask[id / 32]) >> (id % 32)) & 1u) next = id;
    if (next < 0) return;  // nothing allowed: the engine ends the request with an error
    if (!m.accept(next)) __builtin_trap();  // the mask allowed a token the matcher refuses
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    walk(build(data[0], text));
  } catch (const fuselm::grammar::GrammarError&) {
  } catch (const fuselm::server::ApiError& e) {
    if (e.status != 400) __builtin_trap();
  }
  return 0;
}
