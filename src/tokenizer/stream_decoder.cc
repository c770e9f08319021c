#include "tokenizer/stream_decoder.h"

#include "tokenizer/decoder.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::step(std::uint32_t id) {
  const std::string* token = tokenizer_->decode_token(id, skip_special_tokens_);
  if (token == nullptr) return {};
  window_.push_back(*token);
  const Decoder& decoder = *tokenizer_->decoder_;
  const std::size_t hold = decoder.unstable_tail(window_);
  const std::string bytes = decode_tokens(
      decoder, std::vector<std::string>(window_.begin(), window_.end() - static_cast<long>(hold)),
      first_);
  // A lead byte always starts a new character in the lossy conversion, so the text before an
  // incomplete trailing sequence is final whatever bytes come next.
  const std::size_t n = utf8::stable_prefix(bytes);
  std::string text;
  if (n > emitted_) {
    text = utf8::lossy(std::string_view(bytes).substr(emitted_, n - emitted_));
    emitted_ = n;
  }
  if (hold == 0 && n == bytes.size() && !bytes.empty()) {
    window_.clear();
    emitted_ = 0;
    first_ = false;
  }
  return text;
}

std::string StreamDecoder::flush() {
  const std::string bytes = decode_tokens(*tokenizer_->decoder_, window_, first_);
  std::string text =
      emitted_ < bytes.size() ? utf8::lossy(std::string_view(bytes).substr(emitted_)) : "";
  window_.clear();
  emitted_ = 0;
  first_ = bytes.empty() && first_;
  return text;
}

}  // namespace fuselm::tokenizer
