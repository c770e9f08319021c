#include "template/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <stdexcept>

namespace fuselm::tmpl::pystr {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t n = static_cast<utf8proc_ssize_t>(s.size());
  while (n > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t used = utf8proc_iterate(p, n, &cp);
    if (used <= 0) {  // invalid byte: keep it, as surrogateescape does
      out.push_back(0xDC00 + *p);
      used = 1;
    } else {
      out.push_back(static_cast<char32_t>(cp));
    }
    p += used;
    n -= used;
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF) {
      out.push_back(static_cast<char>(c - 0xDC00));
      continue;
    }
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;  // valid UTF-8 assumed; invalid bytes make this an estimate only
}

bool is_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

namespace {
std::vector<std::string> split_ws(const std::u32string& u, int64_t maxsplit, bool reverse) {
  std::vector<std::u32string> parts;
  if (!reverse) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && is_space(u[e - 1])) --e;
        parts.push_back(u.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_space(u[j])) ++j;
      parts.push_back(u.substr(i, j - i));
      i = j;
    }
  } else {
    int64_t i = static_cast<int64_t>(u.size()) - 1;
    while (true) {
      while (i >= 0 && is_space(u[i])) --i;
      if (i < 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t b = 0;
        while (static_cast<int64_t>(b) < i && is_space(u[b])) ++b;
        parts.push_back(u.substr(b, i - b + 1));
        break;
      }
      int64_t j = i;
      while (j >= 0 && !is_space(u[j])) --j;
      parts.push_back(u.substr(j + 1, i - j));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<std::string> out;
  for (auto& p : parts) out.push_back(encode(p));
  return out;
}
}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return split_ws(decode(s), maxsplit, false);
  if (sep->empty()) throw std::invalid_argument("empty separator");
  std::vector<std::string> out;
  size_t i = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t j = s.find(*sep, i);
    if (j == std::string_view::npos) break;
    out.emplace_back(s.substr(i, j - i));
    i = j + sep->size();
  }
  out.emplace_back(s.substr(i));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return split_ws(decode(s), maxsplit, true);
  if (sep->empty()) throw std::invalid_argument("empty separator");
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t j = s.rfind(*sep, end - sep->size());
    if (j == std::string_view::npos) break;
    out.emplace_back(s.substr(j + sep->size(), end - j - sep->size()));
    end = j;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
    out.push_back(encode(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) out.push_back(encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every code point
    std::u32string u = decode(s);
    int64_t done = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (k < u.size()) out += encode(std::u32string_view(&u[k], 1));
    }
    return out;
  }
  size_t i = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t j = s.find(old, i);
    if (j == std::string_view::npos) break;
    out += s.substr(i, j - i);
    out += repl;
    i = j + old.size();
    ++done;
  }
  out += s.substr(i);
  return out;
}

namespace {
std::u32string map_case(const std::u32string& u, bool up) {
  std::u32string out;
  for (char32_t c : u) {
    if (up && c == 0xDF) {  // Python's full mapping: 'ß'.upper() == 'SS'
      out += U"SS";
      continue;
    }
    out.push_back(static_cast<char32_t>(up ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c))
                                           : utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}
bool is_cased_letter(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
}  // namespace

std::string upper(std::string_view s) { return encode(map_case(decode(s), true)); }
std::string lower(std::string_view s) { return encode(map_case(decode(s), false)); }

std::string title(std::string_view s) {
  std::u32string u = decode(s), out;
  bool prev_cased = false;
  for (char32_t c : u) {
    if (is_cased_letter(c)) {
      out.push_back(static_cast<char32_t>(prev_cased ? utf8proc_tolower(static_cast<utf8proc_int32_t>(c))
                                                     : utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
      prev_cased = true;
    } else {
      out.push_back(c);
      prev_cased = false;
    }
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s);
  if (u.empty()) return "";
  std::u32string rest = map_case(u.substr(1), false);
  char32_t first = static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(u[0])));
  return encode(std::u32string(1, first) + rest);
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LL) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LU) cased = true;
  }
  return cased;
}

void adjust_slice(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                  int64_t& first, int64_t& n) {
  int64_t b, e;
  if (step > 0) {
    b = start.value_or(0);
    e = stop.value_or(len);
    if (b < 0) b = std::max<int64_t>(0, b + len);
    if (e < 0) e = std::max<int64_t>(0, e + len);
    b = std::min(b, len);
    e = std::min(e, len);
    n = e > b ? (e - b + step - 1) / step : 0;
  } else {
    b = start ? *start : len - 1;
    e = stop ? *stop : -len - 1;
    if (b < 0) b = b + len < 0 ? -1 : b + len;
    else if (b >= len) b = len - 1;
    if (e < 0) e = e + len < -1 ? -1 : e + len;
    else if (e >= len) e = len - 1;
    n = b > e ? (b - e + (-step) - 1) / (-step) : 0;
  }
  first = b;
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  std::u32string u = decode(s), out;
  int64_t first = 0, n = 0;
  adjust_slice(static_cast<int64_t>(u.size()), start, stop, step, first, n);
  for (int64_t k = 0; k < n; ++k) out.push_back(u[first + k * step]);
  return encode(out);
}

std::optional<std::string> at(std::string_view s, int64_t i) {
  std::u32string u = decode(s);
  int64_t n = static_cast<int64_t>(u.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return encode(std::u32string_view(&u[i], 1));
}

int64_t find(std::string_view s, std::string_view sub) {
  size_t j = s.find(sub);
  return j == std::string_view::npos ? -1 : static_cast<int64_t>(length(s.substr(0, j)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t j = s.find(sub); j != std::string_view::npos; j = s.find(sub, j + sub.size())) ++n;
  return n;
}

}  // namespace fuselm::tmpl::pystr
