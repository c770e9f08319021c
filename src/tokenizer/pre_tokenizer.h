#pragma once
// tokenizer.json "pre_tokenizer": splits normalized text into words before the model sees them.
// Supported: ByteLevel (add_prefix_space, use_regex), Split (String or Regex pattern, any behavior,
// invert), Digits (individual_digits), Metaspace (replacement, prepend_scheme always/first/never,
// split), BertPreTokenizer, Whitespace, WhitespaceSplit, Punctuation (behavior), Sequence.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_field.h"
#include "tokenizer/split.h"

namespace fuselm::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces each word of `words` by its sub-words, in order; empty words are dropped.
  virtual void pre_tokenize(Words& words) const = 0;
};

/// Builds the pre-tokenizer described by `spec` (a "pre_tokenizer" object). Throws
/// std::runtime_error naming the field for an unsupported type or an invalid regex.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Field& spec);

}  // namespace fuselm::tokenizer
