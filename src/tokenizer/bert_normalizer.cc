// BertNormalizer, as HF tokenizers' normalizers/bert.rs: clean_text drops NUL, U+FFFD and
// control characters (keeping \t \n \r) and turns whitespace into ' '; handle_chinese_chars puts
// spaces around CJK ideographs; strip_accents (default: lowercase) decomposes (NFD) and drops Mn
// marks; lowercase maps each character with char::to_lowercase.
#include <optional>

#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  std::string normalize(std::string_view text) const override {
    std::string s;
    s.reserve(text.size());
    for (char32_t c : unicode::code_points(text)) {
      if (clean_text_) {
        if (unicode::is_bert_removed(c)) continue;
        if (unicode::is_white_space(c)) c = ' ';
      }
      if (chinese_ && is_chinese_char(c)) {
        s.push_back(' ');
        utf8::append(s, c);
        s.push_back(' ');
      } else {
        utf8::append(s, c);
      }
    }
    if (strip_accents_) {
      std::string stripped;
      for (char32_t c : unicode::code_points(unicode_normalize(s, "NFD"))) {
        if (!unicode::is_nonspacing_mark(c)) utf8::append(stripped, c);
      }
      s = std::move(stripped);
    }
    if (lowercase_) {
      std::string lower;
      lower.reserve(s.size());
      for (char32_t c : unicode::code_points(s)) unicode::append_lowercase(lower, c);
      s = std::move(lower);
    }
    return s;
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

}  // namespace

std::unique_ptr<Normalizer> make_bert_normalizer(const Field& spec) {
  const bool lowercase = spec.flag("lowercase", true);
  std::optional<bool> strip;
  if (auto f = spec.get("strip_accents")) strip = f->boolean();
  return std::make_unique<BertNormalizer>(spec.flag("clean_text", true),
                                          spec.flag("handle_chinese_chars", true),
                                          strip.value_or(lowercase), lowercase);
}

}  // namespace fuselm::tokenizer
