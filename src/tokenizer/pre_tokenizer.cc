#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

Behavior parse_behavior(const Field& f) {
  const std::string& b = f.str();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  f.unsupported(b);
}

Regex compile(const Field& f, std::string_view pattern, bool literal) {
  try {
    return Regex(pattern, literal);
  } catch (const std::runtime_error& e) {
    f.fail(e.what());
  }
}

// GPT-2's word regex, which ByteLevel uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, false) : nullptr) {}

  void pre_tokenize(Words& words) const override {
    if (add_prefix_space_) {
      for (std::string& w : words.list) {
        if (w.empty() || w.front() != ' ') w.insert(w.begin(), ' ');
      }
    }
    if (regex_) split_words(words, *regex_, Behavior::Isolated, false);
    for (std::string& w : words.list) {
      std::string mapped;
      mapped.reserve(w.size() * 2);
      byte_level::encode(w, mapped);
      w = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(Regex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Words& words) const override {
    split_words(words, regex_, behavior_, invert_);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Digits splits on Unicode numbers (Rust char::is_numeric: Nd, Nl, No): each digit alone, or
// runs of digits together.
class DigitsPre final : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual)
      : regex_(individual ? R"(\p{N})" : R"(\p{N}+)", false) {}
  void pre_tokenize(Words& words) const override {
    split_words(words, regex_, Behavior::Isolated, false);
  }

 private:
  Regex regex_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(Words& words) const override {
    for (const auto& step : steps_) step->pre_tokenize(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};


// Metaspace (SentencePiece): spaces become `replacement` ("▁"), which is also prepended to a word
// (every word, only the one at the start of the input, or none), then optionally split before
// each replacement.
class MetaspacePre final : public PreTokenizer {
 public:
  enum class Scheme { Always, First, Never };
  MetaspacePre(std::string replacement, Scheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split),
        regex_(replacement_, true) {}

  void pre_tokenize(Words& words) const override {
    for (std::size_t i = 0; i < words.list.size(); ++i) {
      std::string& w = words.list[i];
      std::string replaced;
      replaced.reserve(w.size() + replacement_.size());
      for (char c : w) {
        if (c == ' ') replaced += replacement_;
        else replaced.push_back(c);
      }
      // HF's prepend does nothing on an empty string.
      const bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!replaced.empty() && !starts && (scheme_ == Scheme::Always ||
                      (scheme_ == Scheme::First && i == 0 && words.at_origin))) {
        replaced.insert(0, replacement_);
      }
      w = std::move(replaced);
    }
    if (split_) split_words(words, regex_, Behavior::MergedWithNext, false);
  }

 private:
  std::string replacement_;
  Scheme scheme_;
  bool split_;
  Regex regex_;
};

// BertPreTokenizer, WhitespaceSplit and Punctuation: splits on character predicates.
class CharSplitPre final : public PreTokenizer {
 public:
  CharSplitPre(bool on_space, std::optional<Behavior> punctuation)
      : on_space_(on_space), punctuation_(punctuation) {}
  void pre_tokenize(Words& words) const override {
    if (on_space_) split_words(words, unicode::is_white_space, Behavior::Removed);
    if (punctuation_) split_words(words, unicode::is_bert_punctuation, *punctuation_);
  }

 private:
  bool on_space_;
  std::optional<Behavior> punctuation_;
};

// Whitespace: keeps runs of word characters and runs of other non-space characters (\w+|[^\w\s]+
// with Unicode's \w: Alphabetic, marks, Nd, Pc, Join_Control).
class WhitespacePre final : public PreTokenizer {
 public:
  WhitespacePre()
      : regex_(std::string("[") + kWord + "]+|[^" + kWord + R"(\p{White_Space}]+)", false) {}
  static constexpr const char* kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
  void pre_tokenize(Words& words) const override {
    split_words(words, regex_, Behavior::Removed, true);
  }

 private:
  Regex regex_;
};

std::unique_ptr<PreTokenizer> make_metaspace(const Field& spec) {
  const Field rep = spec["replacement"];
  if (rep.str().empty() || utf8::char_length(rep.str(), 0) != rep.str().size()) {
    rep.fail("must be one character");
  }
  MetaspacePre::Scheme scheme = MetaspacePre::Scheme::Always;
  if (auto p = spec.get("prepend_scheme")) {
    if (p->str() == "always") scheme = MetaspacePre::Scheme::Always;
    else if (p->str() == "first") scheme = MetaspacePre::Scheme::First;
    else if (p->str() == "never") scheme = MetaspacePre::Scheme::Never;
    else p->unsupported(p->str());
  } else if (!spec.flag("add_prefix_space", true)) {  // the format before prepend_scheme
    scheme = MetaspacePre::Scheme::Never;
  }
  return std::make_unique<MetaspacePre>(rep.str(), scheme, spec.flag("split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Field& spec) {
  const Field type = spec["type"];
  const std::string& t = type.str();
  if (t == "Sequence") {
    const Field list = spec["pretokenizers"];
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_pre_tokenizer(list.at(i)));
    return std::make_unique<SequencePre>(std::move(steps));
  }
  if (t == "ByteLevel") {
    return std::make_unique<ByteLevelPre>(spec.flag("add_prefix_space", true),
                                          spec.flag("use_regex", true));
  }
  if (t == "Split") {
    const Field pattern = spec["pattern"];
    std::optional<Regex> regex;
    if (auto s = pattern.get("String")) {
      regex.emplace(compile(*s, s->str(), true));
    } else if (auto r = pattern.get("Regex")) {
      regex.emplace(compile(*r, r->str(), false));
    } else {
      pattern.fail("must hold \"String\" or \"Regex\"");
    }
    return std::make_unique<SplitPre>(std::move(*regex), parse_behavior(spec["behavior"]),
                                      spec.flag("invert", false));
  }
  if (t == "Digits") return std::make_unique<DigitsPre>(spec.flag("individual_digits", false));
  if (t == "Metaspace") return make_metaspace(spec);
  if (t == "BertPreTokenizer") return std::make_unique<CharSplitPre>(true, Behavior::Isolated);
  if (t == "WhitespaceSplit") return std::make_unique<CharSplitPre>(true, std::nullopt);
  if (t == "Punctuation") {
    auto b = spec.get("behavior");
    return std::make_unique<CharSplitPre>(false, b ? parse_behavior(*b) : Behavior::Isolated);
  }
  if (t == "Whitespace") return std::make_unique<WhitespacePre>();
  type.unsupported(t);
}

}  // namespace fuselm::tokenizer
