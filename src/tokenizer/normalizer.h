#pragma once
// tokenizer.json "normalizer": Unicode normalization forms (NFC, NFD, NFKC, NFKD, via utf8proc)
// and Sequence of them.
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/json_field.h"

namespace fuselm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Returns the normalized form of `text` (valid UTF-8 in, valid UTF-8 out).
  virtual std::string normalize(std::string_view text) const = 0;
};

/// Builds the normalizer described by `spec` (a "normalizer" object). Throws std::runtime_error
/// naming the field for an unsupported type.
std::unique_ptr<Normalizer> make_normalizer(const Field& spec);

}  // namespace fuselm::tokenizer
