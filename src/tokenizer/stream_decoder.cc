#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::step(std::uint32_t id) {
  if (tokenizer_->append_token_bytes(id, skip_special_tokens_, first_, pending_)) first_ = false;
  // A lead byte always starts a new character in the lossy conversion, so the text before an
  // incomplete trailing sequence is final whatever bytes come next.
  const std::size_t n = utf8::stable_prefix(pending_);
  std::string text = utf8::lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return text;
}

std::string StreamDecoder::flush() {
  std::string text = utf8::lossy(pending_);
  pending_.clear();
  return text;
}

}  // namespace fuselm::tokenizer
