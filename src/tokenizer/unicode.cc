#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer::unicode {

bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {

struct CodeRange {
  char32_t first, last;
};
#include "tokenizer/unicode_tables.inc"

template <std::size_t N>
bool in_table(const CodeRange (&table)[N], char32_t c) {
  const CodeRange* end = table + N;
  const CodeRange* it = std::lower_bound(
      table, end, c, [](const CodeRange& r, char32_t v) { return r.last < v; });
  return it != end && it->first <= c;
}

}  // namespace

bool is_bert_punctuation(char32_t c) { return in_table(kPunctuation, c); }
bool is_bert_removed(char32_t c) { return in_table(kBertRemoved, c); }
bool is_mark(char32_t c) { return in_table(kMarks, c); }
bool is_nonspacing_mark(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_MN;
}

void append_lowercase(std::string& out, char32_t c) {
  if (c == 0x130) {  // the only unconditional multi-character lowercase mapping
    out += "i\xCC\x87";
    return;
  }
  utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    cps.push_back(static_cast<char32_t>(cp));
    i += n > 0 ? static_cast<std::size_t>(n) : 1;
  }
  return cps;
}

std::string to_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8::append(out, c);
  return out;
}

}  // namespace fuselm::tokenizer::unicode
