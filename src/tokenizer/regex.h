#pragma once
// PCRE2 (UTF + UCP, JIT) regular expressions with the match iteration HF tokenizers gets from
// Oniguruma: non-overlapping matches left to right, where an empty match right after the previous
// match is skipped. Patterns use Oniguruma/Ruby semantics, so ^ and $ are line anchors.
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace fuselm::tokenizer {

/// One match or gap: bytes [start, end) of the searched text.
struct Span {
  std::size_t start;
  std::size_t end;
  bool is_match;
};

class Regex {
 public:
  /// Compiles `pattern` (a regex, or with `literal` a plain string; `anchored` makes every match
  /// start exactly at the search position). Throws std::runtime_error with PCRE2's message and
  /// offset if it does not compile.
  Regex(std::string_view pattern, bool literal, bool anchored = false);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  /// Appends the matches of this regex in `text` (valid UTF-8) to `out`, each as a match span.
  /// Throws std::runtime_error if PCRE2 fails (e.g. a resource limit).
  void find_all(std::string_view text, std::vector<Span>& out) const;

  /// Splits `text` into spans covering it in order: the matches and the gaps between them, as HF's
  /// Pattern::find_matches does. An empty text gives one empty gap.
  void find_matches(std::string_view text, std::vector<Span>& out) const;

  /// True when the regex matches in `text` at or after byte `pos` (exactly at `pos` if anchored).
  bool matches_at(std::string_view text, std::size_t pos) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Unicode predicates with the semantics of Rust's regex crate, as HF's added-token matching uses.
/// True when the last character of `s` is a word character
/// (\w: Alphabetic, M, Nd, Pc, Join_Control).
bool ends_with_word(std::string_view s);
/// True when the first character of `s` is a word character.
bool starts_with_word(std::string_view s);
/// Byte offset where the trailing White_Space run of `s` starts (s.size() if none).
std::size_t trailing_space_start(std::string_view s);
/// Byte length of the leading White_Space run of `s`.
std::size_t leading_space_length(std::string_view s);

}  // namespace fuselm::tokenizer
