#include "tokenizer/utf8.h"

namespace fuselm::tokenizer::utf8 {
namespace {

// Step of the UTF-8 decoder over bytes[i..]: the number of bytes that form one valid character
// (`valid` true), or the length of the maximal invalid subpart (`valid` false, >= 1). When the
// bytes end inside a sequence that is valid so far, `truncated` is true and `length` covers it.
struct Step {
  std::size_t length;
  bool valid;
  bool truncated;
};

Step step(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, true, false};
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false};
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false, true};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {k, false, false};
  }
  return {need + 1, true, false};
}

}  // namespace

bool is_valid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const Step st = step(s, i);
    if (!st.valid) return false;
    i += st.length;
  }
  return true;
}

std::size_t char_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const Step st = step(bytes, i);
    if (st.valid) {
      out.append(bytes.substr(i, st.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    i += st.length;
  }
  return out;
}

std::size_t stable_prefix(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const Step st = step(bytes, i);
    if (st.truncated) return i;
    i += st.length;
  }
  return bytes.size();
}

}  // namespace fuselm::tokenizer::utf8
