#pragma once
// tokenizer.json's Pattern field, {"String": s} or {"Regex": r}, as the Replace normalizer and the
// Replace decoder read it (tokenizers' normalizers/replace.rs ReplacePattern).
#include "tokenizer/json_field.h"
#include "tokenizer/regex.h"

namespace fuselm::tokenizer {

/// The compiled pattern: a literal for "String", a regex for "Regex". Throws the field's one-line
/// error when it holds neither or the regex does not compile.
Regex pattern_regex(const Field& pattern);

}  // namespace fuselm::tokenizer
