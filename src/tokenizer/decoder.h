#pragma once
// tokenizer.json "decoder": turns the token strings of ids back into bytes, as HF's decode_chain
// over the whole list of tokens. Supported: ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace, WordPiece, Sequence, and no decoder (tokens joined by spaces, as HF does).
//
// Streaming (StreamDecoder) decodes windows of tokens: `first` says whether a window starts the
// text, so that what depends on the start (Metaspace's first token, Strip after Fuse, the space
// joining) applies once, and unstable_tail() names the trailing tokens whose text can still
// change with the next token (ByteFallback's byte runs).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_field.h"

namespace fuselm::tokenizer {

/// The tokens going through a decoder chain. `first`: tokens[0] starts the decoded text.
/// `fused`: an earlier step (Fuse, ByteLevel) joined the tokens into one.
struct DecodeState {
  std::vector<std::string> tokens;
  bool first = true;
  bool fused = false;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Transforms `state` in place (HF's decode_chain). Token strings are bytes, possibly not valid
  /// UTF-8 (ByteLevel); the caller makes the concatenation valid.
  virtual void decode_chain(DecodeState& state) const = 0;
  /// How many trailing tokens of `tokens` (token strings before decoding) may decode differently
  /// once more tokens follow.
  virtual std::size_t unstable_tail(const std::vector<std::string>& tokens) const {
    (void)tokens;
    return 0;
  }
};

/// Builds the decoder described by `spec`, or the space-joining decoder when it is absent. Throws
/// std::runtime_error naming the field for an unsupported type or option.
std::unique_ptr<Decoder> make_decoder(const std::optional<Field>& spec);

/// Runs `decoder` over `tokens` and concatenates the result (bytes).
std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens, bool first);

}  // namespace fuselm::tokenizer
