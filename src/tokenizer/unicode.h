#pragma once
// Unicode character predicates and mappings with the semantics of the Rust functions HF
// tokenizers calls (char::is_whitespace, unicode_categories, char::to_lowercase).
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::tokenizer::unicode {

/// Rust char::is_whitespace: the White_Space property.
bool is_white_space(char32_t c);
// The table-based classes below come from Rust crates whose tables are older than utf8proc's;
// unicode_tables.inc holds them as HF tokenizers applies them.
/// BertPreTokenizer's and Punctuation's is_bert_punc: ASCII punctuation or category P*.
bool is_bert_punctuation(char32_t c);
/// What BertNormalizer's clean_text removes: NUL, U+FFFD, and is_other (C*) except \t \n \r.
bool is_bert_removed(char32_t c);
/// unicode-normalization's is_combining_mark, which holds every mark (Mn, Mc, Me) of its
/// version: what StripAccents removes.
bool is_mark(char32_t c);
/// General category Mn (utf8proc): what BertNormalizer's strip_accents removes after NFD.
bool is_nonspacing_mark(char32_t c);
/// Appends Rust's char::to_lowercase of `c` (full mapping: U+0130 becomes "i\u0307").
void append_lowercase(std::string& out, char32_t c);

/// The code points of valid UTF-8 `s`.
std::vector<char32_t> code_points(std::string_view s);
/// UTF-8 of code points.
std::string to_utf8(const std::vector<char32_t>& cps);

}  // namespace fuselm::tokenizer::unicode
