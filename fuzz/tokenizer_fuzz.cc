// libFuzzer target: a tokenizer.json, then text. The input up to its first NUL byte is the JSON,
// the rest the text to encode (fixed texts when there is none). Loading either succeeds or throws
// std::runtime_error; a loaded tokenizer encodes valid UTF-8 (or throws std::runtime_error for
// invalid), and what it encodes decodes without a failure.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <optional>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view json = in.substr(0, nul);
  const std::string_view rest = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  std::optional<fuselm::tokenizer::Tokenizer> tok;
  try {
    tok.emplace(fuselm::tokenizer::Tokenizer::from_json(json));
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string_view texts[] = {rest, "Hello, world! It's 12 o'clock.\n\t  caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac <|im_end|>"};
  for (const auto text : texts) {
    try {
      for (bool special : {false, true}) {
        const auto ids = tok->encode(text, special);
        (void)tok->decode(ids, !special);
      }
    } catch (const std::runtime_error&) {
    }
  }
  for (uint32_t id = 0; id < 8 && id < tok->vocab_size(); ++id) (void)tok->id_to_token(id);
  return 0;
}
