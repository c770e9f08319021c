#pragma once
// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, StripAccents, Strip,
// Prepend, Replace, Sequence (normalizer.cc), BertNormalizer (bert_normalizer.cc) and
// Precompiled (SentencePiece's charsmap, precompiled.h).
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

/// BertNormalizer {clean_text, handle_chinese_chars, strip_accents, lowercase}.
std::unique_ptr<Normalizer> make_bert_normalizer(const Field& spec);

/// Applies the Unicode normalization form `form` ("NFC", "NFD", "NFKC" or "NFKD") to `text`.
std::string unicode_normalize(std::string_view text, std::string_view form);

}  // namespace fuselm::tokenizer
