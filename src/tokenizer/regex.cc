#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

// Per-thread match state: one match-data block (only the whole-match span is read) and a JIT stack
// large enough for long whitespace or letter runs; the interpreter is the fallback past it.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (data == nullptr || jit_stack == nullptr || context == nullptr) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }

  // First match at or after `from`, or nullopt.
  std::optional<std::pair<std::size_t, std::size_t>> match(std::string_view text,
                                                           std::size_t from) const {
    ThreadMatchState& st = match_state();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (jit) rc = pcre2_jit_match(code, subject, text.size(), from, 0, st.data, st.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data,
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
    if (rc < 0) throw std::runtime_error("tokenizer regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    return std::make_pair(static_cast<std::size_t>(ov[0]), static_cast<std::size_t>(ov[1]));
  }
};

Regex::Regex(std::string_view pattern, bool literal, bool anchored)
    : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;
  if (anchored) options |= PCRE2_ANCHORED;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              options, &err, &err_offset, nullptr);
  if (impl_->code == nullptr) {
    throw std::runtime_error("regex does not compile at offset " + std::to_string(err_offset) +
                             ": " + pcre2_message(err));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  // Oniguruma's find_iter: an empty match ending where the previous match ended is skipped, and
  // the search moves on by one character.
  std::size_t pos = 0;
  std::optional<std::size_t> last_end;
  while (pos <= text.size()) {
    auto m = impl_->match(text, pos);
    if (!m) break;
    const auto [s, e] = *m;
    if (s == e && last_end == e) {
      pos += pos < text.size() ? utf8::char_length(text, pos) : 1;
      continue;
    }
    pos = e;
    last_end = e;
    out.push_back({s, e, true});
  }
}

void Regex::find_matches(std::string_view text, std::vector<Span>& out) const {
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  std::vector<Span> matches;
  find_all(text, matches);
  std::size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.start) out.push_back({prev, m.start, false});
    out.push_back(m);
    prev = m.end;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
}

bool Regex::matches_at(std::string_view text, std::size_t pos) const {
  return impl_->match(text, pos).has_value();
}

namespace {
// Rust regex classes: \w is Alphabetic + M + Nd + Pc + Join_Control, \s is White_Space.
const Regex& word_char() {
  static const Regex re(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", false, true);
  return re;
}
const Regex& space_char() {
  static const Regex re(R"(\p{White_Space})", false, true);
  return re;
}
std::size_t prev_char_start(std::string_view s, std::size_t end) {
  std::size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}
}  // namespace

bool ends_with_word(std::string_view s) {
  return !s.empty() && word_char().matches_at(s, prev_char_start(s, s.size()));
}
bool starts_with_word(std::string_view s) { return !s.empty() && word_char().matches_at(s, 0); }

std::size_t trailing_space_start(std::string_view s) {
  std::size_t p = s.size();
  while (p > 0) {
    const std::size_t q = prev_char_start(s, p);
    if (!space_char().matches_at(s, q)) break;
    p = q;
  }
  return p;
}

std::size_t leading_space_length(std::string_view s) {
  std::size_t p = 0;
  while (p < s.size() && space_char().matches_at(s, p)) p += utf8::char_length(s, p);
  return p;
}

}  // namespace fuselm::tokenizer
