#pragma once
// The GPT-2 byte-level alphabet: every byte maps to one printable code point ('Ġ' for a space),
// so that any byte string is a string of vocabulary characters.
#include <string>
#include <string_view>

namespace fuselm::tokenizer::byte_level {

/// The UTF-8 text of the code point that stands for byte b.
const std::string& char_of(unsigned char b);

/// Appends the byte-level form of `text` (each byte replaced by its code point) to `out`.
void encode(std::string_view text, std::string& out);

/// Appends the bytes that `token` stands for to `out` when every character of `token` is in the
/// alphabet and returns true; otherwise appends nothing and returns false.
bool decode(std::string_view token, std::string& out);

}  // namespace fuselm::tokenizer::byte_level
