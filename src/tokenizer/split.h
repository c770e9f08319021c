#pragma once
// HF's NormalizedString::split: cutting words at pattern matches with a SplitDelimiterBehavior,
// for the pre-tokenizers (regex or string patterns, and character predicates).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace fuselm::tokenizer {

/// HF's SplitDelimiterBehavior: what happens to the matched delimiters.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

/// The words of one piece of input, in order. `at_origin`: list[0] starts at offset 0 of the
/// whole input (HF's offsets_original().0 == 0, which Metaspace's prepend_scheme "first" tests).
struct Words {
  std::vector<std::string> list;
  bool at_origin = false;
};

/// Applies `behavior` to the spans of `word` (covering it in order) and appends the resulting
/// non-empty pieces to `out`. Returns the byte offset in `word` of the first piece appended
/// (word.size() when none is).
std::size_t split_spans(std::string_view word, const std::vector<Span>& spans, Behavior behavior,
                        std::vector<std::string>& out);

/// Splits every word by `regex` with `behavior`, optionally inverting which spans are matches.
void split_words(Words& words, const Regex& regex, Behavior behavior, bool invert);

/// Splits every word with `behavior`, each character for which `is_delimiter` holds being one
/// match (HF's char-predicate Pattern).
void split_words(Words& words, const std::function<bool(char32_t)>& is_delimiter,
                 Behavior behavior);

}  // namespace fuselm::tokenizer
