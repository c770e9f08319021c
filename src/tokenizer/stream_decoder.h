#pragma once
// Incremental decoding for streaming generation: feed ids one at a time, get back only text that
// no later id can change. Tokens are decoded in windows through the tokenizer's decoder chain; a
// window closes once its text is final (no incomplete UTF-8 character, no open ByteFallback byte
// run), and the next one is decoded as a continuation (no first-token rules).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fuselm::tokenizer {

class StreamDecoder {
 public:
  /// Decodes ids of `tokenizer`, which must outlive this object.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  /// Feeds one id; returns the text it completes (often empty while a character is incomplete).
  /// The concatenation of all step() results and flush() equals Tokenizer::decode of all ids.
  std::string step(std::uint32_t id);

  /// Ends the stream: returns any held-back text, an incomplete character as U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  bool first_ = true;                // the window starts the text
  std::vector<std::string> window_;  // token strings of the open window
  std::size_t emitted_ = 0;          // bytes of the window's decoded text already returned
};

}  // namespace fuselm::tokenizer
