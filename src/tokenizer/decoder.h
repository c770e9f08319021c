#pragma once
// tokenizer.json "decoder": turns the token strings of ids back into bytes. Supported: ByteLevel,
// and no decoder (tokens joined by spaces, as HF does). Both are token-local: a token's bytes
// depend only on the token and on whether it is the first one decoded, which StreamDecoder needs.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/json_field.h"

namespace fuselm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Appends the bytes of `token` to `out` (bytes, possibly not valid UTF-8 on their own).
  virtual void append(std::string_view token, bool first, std::string& out) const = 0;
};

/// Builds the decoder described by `spec`, or the space-joining decoder when it is absent. Throws
/// std::runtime_error naming the field for an unsupported type.
std::unique_ptr<Decoder> make_decoder(const std::optional<Field>& spec);

}  // namespace fuselm::tokenizer
