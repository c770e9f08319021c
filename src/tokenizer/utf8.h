#pragma once
// UTF-8 byte-level helpers of the tokenizer: validation, code point stepping, and the lossy
// conversion that decoding uses. Unicode character classes live in regex.h (PCRE2).
#include <cstddef>
#include <string>
#include <string_view>

namespace fuselm::tokenizer::utf8 {

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool is_valid(std::string_view s);

/// Byte length of the character that starts at s[i]; `s` must be valid UTF-8 and i < s.size().
std::size_t char_length(std::string_view s, std::size_t i);

/// Appends the UTF-8 encoding of code point `cp` (must be a Unicode scalar value) to `out`.
void append(std::string& out, char32_t cp);

/// Converts arbitrary bytes to valid UTF-8, replacing each maximal invalid subpart with U+FFFD.
/// This is the substitution of Rust's String::from_utf8_lossy, which HF tokenizers decode uses.
std::string lossy(std::string_view bytes);

/// Length of the longest prefix of `bytes` whose lossy conversion cannot change when more bytes
/// are appended: all of `bytes` except a trailing sequence that is incomplete but valid so far.
std::size_t stable_prefix(std::string_view bytes);

}  // namespace fuselm::tokenizer::utf8
