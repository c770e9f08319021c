#include "template/lexer.h"

#include <utf8proc.h>

#include <cstring>

#include "template/chat_template.h"
#include "template/pystr.h"

namespace fuselm::tmpl {
namespace {

[[noreturn]] void fail(int line, const std::string& what) {
  throw TemplateError("line " + std::to_string(line) + ": " + what);
}

/// jinja2's lexer splits on \r\n, \r and \n, joins with \n and drops one trailing newline
/// (keep_trailing_newline=False).
std::string normalise(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out.push_back('\n');
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out.push_back(src[k]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

/// Length in bytes of the Python-whitespace code point at s[pos], or 0.
size_t space_at(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  utf8proc_int32_t cp = 0;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                            static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0) return 0;
  return pystr::is_space(static_cast<char32_t>(cp)) ? static_cast<size_t>(n) : 0;
}

size_t skip_space(const std::string& s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

bool all_space(const std::string& s) {
  if (s.empty()) return false;
  return skip_space(s, 0) == s.size();
}

int count_lines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t k = from; k < to; ++k) n += s[k] == '\n';
  return n;
}

/// Decodes a string literal's body as jinja2 does (Python's unicode-escape on the raw text).
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    char c = body[k];
    if (c != '\\' || k + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++k];
    auto hex = [&](size_t digits) {
      uint32_t cp = 0;
      for (size_t d = 1; d <= digits; ++d) {
        if (k + d >= body.size()) fail(line, "truncated escape in string literal");
        char h = body[k + d];
        cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                            : (std::tolower(static_cast<unsigned char>(h)) - 'a' + 10));
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail(line, "bad escape in string literal");
      }
      k += digits;
      out += pystr::encode(std::u32string(1, static_cast<char32_t>(cp)));
    };
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case '\n': break;  // line continuation
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        uint32_t cp = static_cast<uint32_t>(e - '0');
        for (int d = 0; d < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++d)
          cp = cp * 8 + static_cast<uint32_t>(body[++k] - '0');
        out += pystr::encode(std::u32string(1, static_cast<char32_t>(cp)));
        break;
      }
      default: out.push_back('\\'); out.push_back(e); break;  // Python keeps unknown escapes
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t open = find_open(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      if (open == s_.size()) {
        emit_text(text, pos_);
        break;
      }
      char kind = s_[open + 1];
      char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (mod == '-') {
        text = pystr::strip(text, std::nullopt, false, true);
      } else if (kind != '{' && mod != '+') {  // lstrip_blocks: blocks and comments only
        size_t l = text.rfind('\n');
        size_t l_pos = l == std::string::npos ? 0 : l + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) text.resize(l_pos);
      }
      emit_text(text, pos_);
      line_ += count_lines(s_, pos_, open);
      pos_ = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') line_starting = comment();
      else line_starting = tag(kind == '{');
    }
    out_.push_back({Tok::Eof, "", line_});
    return std::move(out_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < s_.size(); ++k)
      if (s_[k] == '{' && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    return s_.size();
  }

  void emit_text(const std::string& text, size_t at) {
    (void)at;
    if (!text.empty()) out_.push_back({Tok::Text, text, line_});
  }

  /// After the end marker: `-` strips all following whitespace, plain `%}`/`#}` one newline.
  bool finish(size_t end_pos, bool dash, bool trim) {
    size_t p = end_pos;
    if (dash) p = skip_space(s_, p);
    else if (trim && p < s_.size() && s_[p] == '\n') ++p;
    line_ += count_lines(s_, end_pos, p);
    pos_ = p;
    return p > end_pos && s_[p - 1] == '\n';
  }

  bool comment() {
    size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail(line_, "unterminated comment");
    bool dash = end > pos_ && s_[end - 1] == '-';
    bool plus = end > pos_ && s_[end - 1] == '+';
    line_ += count_lines(s_, pos_, end);
    return finish(end + 2, dash, !plus);
  }

  bool tag(bool variable) {
    out_.push_back({variable ? Tok::VarBegin : Tok::BlockBegin, "", line_});
    int depth = 0;
    const char close = variable ? '}' : '%';
    while (true) {
      size_t p = skip_space(s_, pos_);
      line_ += count_lines(s_, pos_, p);
      pos_ = p;
      if (pos_ >= s_.size()) fail(line_, variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (depth == 0) {
        char c = s_[pos_];
        bool mod = (c == '-' || (!variable && c == '+'));
        size_t at = pos_ + (mod ? 1 : 0);
        if (at + 1 < s_.size() && s_[at] == close && s_[at + 1] == '}') {
          out_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", line_});
          return finish(at + 2, c == '-', !variable && c != '+');
        }
      }
      token(depth);
    }
  }

  void token(int& depth) {
    const char c = s_[pos_];
    if (c == '\'' || c == '"') return string(c);
    if (std::isdigit(static_cast<unsigned char>(c))) return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
      out_.push_back({Tok::Name, s_.substr(pos_, e - pos_), line_});
      pos_ = e;
      return;
    }
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (s_.compare(pos_, 2, op) == 0) {
        out_.push_back({Tok::Op, op, line_});
        pos_ += 2;
        return;
      }
    if (std::strchr("+-*/%~[](){}><=.:|,;", c) == nullptr || c == '\0')
      fail(line_, std::string("unexpected char '") + c + "'");
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) fail(line_, std::string("unexpected '") + c + "'");
      --depth;
    }
    out_.push_back({Tok::Op, std::string(1, c), line_});
    ++pos_;
  }

  void string(char q) {
    size_t k = pos_ + 1;
    while (k < s_.size() && s_[k] != q) k += s_[k] == '\\' ? 2 : 1;
    if (k >= s_.size()) fail(line_, "unexpected end of string literal");
    Token t{Tok::String, unescape(s_.substr(pos_ + 1, k - pos_ - 1), line_), line_};
    out_.push_back(std::move(t));
    line_ += count_lines(s_, pos_, k);
    pos_ = k + 1;
  }

  void number() {
    auto digits = [&](size_t k) {
      while (k < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[k])) ||
                               (s_[k] == '_' && k + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k + 1])))))
        ++k;
      return k;
    };
    size_t e = digits(pos_);
    bool is_float = false;
    bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';  // foo.0 is an attribute index
    if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        e = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (s_[k] != '_') text.push_back(s_[k]);
    Token t{is_float ? Tok::Float : Tok::Int, text, line_};
    if (is_float) t.f = std::stod(text);
    else {
      try {
        t.i = std::stoll(text);
      } catch (const std::exception&) {
        fail(line_, "integer literal " + text + " does not fit in 64 bits");
      }
    }
    out_.push_back(std::move(t));
    pos_ = e;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalise(source)).run(); }

}  // namespace fuselm::tmpl
