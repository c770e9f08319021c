#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <vector>

#include "tokenizer/precompiled.h"
#include "tokenizer/pattern_field.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

utf8proc_option_t form_options(std::string_view form) {
  int o = UTF8PROC_STABLE;
  if (form == "NFC") o |= UTF8PROC_COMPOSE;
  else if (form == "NFD") o |= UTF8PROC_DECOMPOSE;
  else if (form == "NFKC") o |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (form == "NFKD") o |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else throw std::runtime_error("unknown Unicode normalization form " + std::string(form));
  return static_cast<utf8proc_option_t>(o);
}

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(std::string form) : form_(std::move(form)) {}
  std::string normalize(std::string_view text) const override {
    return unicode_normalize(text, form_);
  }

 private:
  std::string form_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Prepend: `prepend` before any non-empty text (SentencePiece's dummy prefix "▁").
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    return prepend_ + std::string(text);
  }

 private:
  std::string prepend_;
};

// Replace: every non-overlapping match of a string or regex by `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    std::vector<Span> matches;
    regex_.find_all(text, matches);
    if (matches.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size());
    std::size_t prev = 0;
    for (const Span& m : matches) {
      out.append(text.substr(prev, m.start - prev));
      out += content_;
      prev = m.end;
    }
    out.append(text.substr(prev));
    return out;
  }

 private:
  Regex regex_;
  std::string content_;
};

// Strip: White_Space on the left and/or right.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    if (right_) text = text.substr(0, trailing_space_start(text));
    if (left_) text.remove_prefix(leading_space_length(text));
    return std::string(text);
  }

 private:
  bool left_, right_;
};

// Lowercase (per character, Rust's char::to_lowercase) and StripAccents (drops Mn characters;
// HF applies no decomposition here, so a normalizer before it must decompose).
class CharMapNormalizer final : public Normalizer {
 public:
  explicit CharMapNormalizer(bool lowercase) : lowercase_(lowercase) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    for (char32_t c : unicode::code_points(text)) {
      if (lowercase_) unicode::append_lowercase(out, c);
      else if (!unicode::is_mark(c)) utf8::append(out, c);
    }
    return out;
  }

 private:
  bool lowercase_;
};

class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {}
  std::string normalize(std::string_view text) const override { return map_.normalize(text); }

 private:
  PrecompiledCharsmap map_;
};

std::unique_ptr<Normalizer> make_precompiled(const Field& spec) {
  const Field map = spec["precompiled_charsmap"];
  const std::string where = map.file() + ": " + map.path();
  std::string blob = base64_decode(map.str(), where);
  if (blob.empty()) map.fail("is empty");
  return std::make_unique<PrecompiledNormalizer>(PrecompiledCharsmap(blob, where));
}

}  // namespace

std::string unicode_normalize(std::string_view text, std::string_view form) {
  if (text.empty()) return {};
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out, form_options(form));
  if (n < 0) {
    throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

std::unique_ptr<Normalizer> make_normalizer(const Field& spec) {
  const Field type = spec["type"];
  const std::string& t = type.str();
  if (t == "Sequence") {
    const Field list = spec["normalizers"];
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_normalizer(list.at(i)));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
    return std::make_unique<UnicodeForm>(t);
  }
  if (t == "Prepend") return std::make_unique<PrependNormalizer>(spec["prepend"].str());
  if (t == "Replace") {
    return std::make_unique<ReplaceNormalizer>(pattern_regex(spec["pattern"]),
                                               spec["content"].str());
  }
  if (t == "Strip") {
    return std::make_unique<StripNormalizer>(spec.flag("strip_left", false),
                                             spec.flag("strip_right", false));
  }
  if (t == "Lowercase") return std::make_unique<CharMapNormalizer>(true);
  if (t == "StripAccents") return std::make_unique<CharMapNormalizer>(false);
  if (t == "BertNormalizer") return make_bert_normalizer(spec);
  if (t == "Precompiled") return make_precompiled(spec);
  type.unsupported(t);
}

}  // namespace fuselm::tokenizer
