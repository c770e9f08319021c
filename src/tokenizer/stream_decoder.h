#pragma once
// Incremental decoding for streaming generation: feed ids one at a time, get back only complete
// UTF-8 text. Bytes of a character split across tokens are held back until it completes.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace fuselm::tokenizer {

class StreamDecoder {
 public:
  /// Decodes ids of `tokenizer`, which must outlive this object.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  /// Feeds one id; returns the text it completes (often empty while a character is incomplete).
  /// The concatenation of all step() results and flush() equals Tokenizer::decode of all ids.
  std::string step(std::uint32_t id);

  /// Ends the stream: returns any held-back bytes, an incomplete character as U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  bool first_ = true;     // no token has been decoded yet
  std::string pending_;   // bytes of an incomplete trailing UTF-8 sequence
};

}  // namespace fuselm::tokenizer
