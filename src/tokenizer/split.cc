#include "tokenizer/split.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

std::size_t split_spans(std::string_view word, const std::vector<Span>& spans, Behavior behavior,
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
  std::size_t first = word.size();
  for (const Cut& c : cuts) {
    if (c.remove || c.end <= c.start) continue;
    if (first == word.size()) first = c.start;
    out.emplace_back(word.substr(c.start, c.end - c.start));
  }
  return first;
}

namespace {

// Splits each word by its spans, keeping `at_origin` true only when the first word's first piece
// still starts at its beginning.
template <typename SpansOf>
void split_each(Words& words, Behavior behavior, SpansOf&& spans_of) {
  std::vector<std::string> out;
  out.reserve(words.list.size());
  std::vector<Span> spans;
  bool at_origin = false;
  for (std::size_t i = 0; i < words.list.size(); ++i) {
    const std::string& w = words.list[i];
    spans.clear();
    spans_of(w, spans);
    const std::size_t before = out.size();
    const std::size_t first = split_spans(w, spans, behavior, out);
    if (i == 0 && words.at_origin && out.size() > before && first == 0) at_origin = true;
  }
  words.list = std::move(out);
  words.at_origin = at_origin;
}

}  // namespace

void split_words(Words& words, const Regex& regex, Behavior behavior, bool invert) {
  split_each(words, behavior, [&](const std::string& w, std::vector<Span>& spans) {
    regex.find_matches(w, spans);
    if (invert) {
      for (Span& s : spans) s.is_match = !s.is_match;
    }
  });
}

void split_words(Words& words, const std::function<bool(char32_t)>& is_delimiter,
                 Behavior behavior) {
  split_each(words, behavior, [&](const std::string& w, std::vector<Span>& spans) {
    std::size_t gap = 0;
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t n = utf8::char_length(w, i);
      utf8proc_int32_t cp = 0;
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(w.data() + i),
                       static_cast<utf8proc_ssize_t>(n), &cp);
      if (is_delimiter(static_cast<char32_t>(cp))) {
        if (gap < i) spans.push_back({gap, i, false});
        spans.push_back({i, i + n, true});
        gap = i + n;
      }
      i += n;
    }
    if (gap < w.size() || w.empty()) spans.push_back({gap, w.size(), false});
  });
}

}  // namespace fuselm::tokenizer
