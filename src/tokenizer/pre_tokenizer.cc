#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"

namespace fuselm::tokenizer {
namespace {

// HF's SplitDelimiterBehavior: what happens to the matched delimiters.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Applies `behavior` to the spans of `word` (covering it in order) and appends the resulting
// non-empty pieces to `out`, as NormalizedString::split does.
void split_spans(std::string_view word, const std::vector<Span>& spans, Behavior behavior,
                 std::vector<std::string>& out) {
  struct Cut {
    std::size_t start, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  switch (behavior) {
    case Behavior::Isolated:
      for (const Span& s : spans) cuts.push_back({s.start, s.end, false});
      break;
    case Behavior::Removed:
      for (const Span& s : spans) cuts.push_back({s.start, s.end, s.is_match});
      break;
    case Behavior::Contiguous: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.is_match == previous && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.start, s.end, false});
        previous = s.is_match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.start, s.end, false});
        previous = s.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous && !cuts.empty()) cuts.back().start = it->start;
        else cuts.push_back({it->start, it->end, false});
        previous = it->is_match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
    }
  }
  for (const Cut& c : cuts) {
    if (!c.remove && c.end > c.start) out.emplace_back(word.substr(c.start, c.end - c.start));
  }
}

// Splits every word by `regex` with `behavior`, optionally inverting which spans are matches.
void split_words(std::vector<std::string>& words, const Regex& regex, Behavior behavior,
                 bool invert) {
  std::vector<std::string> out;
  out.reserve(words.size());
  std::vector<Span> spans;
  for (const std::string& w : words) {
    spans.clear();
    regex.find_matches(w, spans);
    if (invert) {
      for (Span& s : spans) s.is_match = !s.is_match;
    }
    split_spans(w, spans, behavior, out);
  }
  words = std::move(out);
}

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

  void pre_tokenize(std::vector<std::string>& words) const override {
    if (add_prefix_space_) {
      for (std::string& w : words) {
        if (w.empty() || w.front() != ' ') w.insert(w.begin(), ' ');
      }
    }
    if (regex_) split_words(words, *regex_, Behavior::Isolated, false);
    for (std::string& w : words) {
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
  void pre_tokenize(std::vector<std::string>& words) const override {
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
  void pre_tokenize(std::vector<std::string>& words) const override {
    split_words(words, regex_, Behavior::Isolated, false);
  }

 private:
  Regex regex_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<std::string>& words) const override {
    for (const auto& step : steps_) step->pre_tokenize(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

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
  type.unsupported(t);
}

}  // namespace fuselm::tokenizer
