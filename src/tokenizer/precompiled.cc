#include "tokenizer/precompiled.h"

#include <utf8proc.h>

#include <stdexcept>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

// darts-clone unit layout (the same bit tricks as spm_precompiled's ArrayUnit).
bool has_leaf(std::uint32_t unit) { return ((unit >> 8) & 1) == 1; }
std::uint32_t value(std::uint32_t unit) { return unit & ((1u << 31) - 1); }
std::uint32_t label(std::uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
std::size_t offset(std::uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

char32_t decode_at(std::string_view s, std::size_t i, std::size_t n) {
  utf8proc_int32_t cp = 0;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                   static_cast<utf8proc_ssize_t>(n), &cp);
  return static_cast<char32_t>(cp);
}

}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& where) {
  if (blob.size() < 4) throw std::runtime_error(where + " is shorter than its 4-byte header");
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const std::uint32_t trie_size = b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t{b[3]} << 24);
  if (trie_size % 4 != 0 || trie_size == 0 || trie_size > blob.size() - 4) {
    throw std::runtime_error(where + ": trie size " + std::to_string(trie_size) +
                             " does not fit the " + std::to_string(blob.size()) + "-byte blob");
  }
  units_.resize(trie_size / 4);
  for (std::size_t i = 0; i < units_.size(); ++i) {
    const unsigned char* u = b + 4 + 4 * i;
    units_[i] = u[0] | (u[1] << 8) | (u[2] << 16) | (std::uint32_t{u[3]} << 24);
  }
  normalized_.assign(blob.substr(4 + trie_size));
  if (!utf8::is_valid(normalized_)) {
    throw std::runtime_error(where + ": the replacement strings are not valid UTF-8");
  }
}

std::optional<std::uint32_t> PrecompiledCharsmap::shortest_prefix_value(
    std::string_view key) const {
  std::size_t pos = offset(units_[0]);
  for (unsigned char c : key) {
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;  // a malformed trie ends the search
    const std::uint32_t unit = units_[pos];
    if (label(unit) != c) return std::nullopt;
    pos ^= offset(unit);
    if (has_leaf(unit)) {
      if (pos >= units_.size()) return std::nullopt;
      return value(units_[pos]);
    }
  }
  return std::nullopt;
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  const auto index = shortest_prefix_value(chunk);
  if (!index) return std::nullopt;
  if (*index >= normalized_.size()) return std::string_view();
  const std::size_t end = normalized_.find('\0', *index);
  const std::size_t length = end == std::string::npos ? end : end - *index;
  return std::string_view(normalized_).substr(*index, length);
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  auto per_char = [&](std::string_view grapheme) {
    for (std::size_t i = 0; i < grapheme.size();) {
      const std::size_t n = utf8::char_length(grapheme, i);
      const std::string_view part = grapheme.substr(i, n);
      if (auto norm = transform(part)) out.append(*norm);
      else out.append(part);
      i += n;
    }
  };
  // Extended grapheme clusters (UAX #29), as unicode-segmentation's graphemes(true).
  std::size_t start = 0;
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  for (std::size_t i = 0; i <= text.size();) {
    const bool at_end = i == text.size();
    std::size_t n = 0;
    char32_t cp = 0;
    if (!at_end) {
      n = utf8::char_length(text, i);
      cp = decode_at(text, i, n);
    }
    if (at_end || (i > start && utf8proc_grapheme_break_stateful(
                                    static_cast<utf8proc_int32_t>(prev),
                                    static_cast<utf8proc_int32_t>(cp), &state))) {
      const std::string_view g = text.substr(start, i - start);
      if (!g.empty()) {
        std::optional<std::string_view> whole;
        if (g.size() < 6) whole = transform(g);
        if (whole) out.append(*whole);
        else per_char(g);
      }
      start = i;
      if (at_end) break;
    }
    prev = cp;
    i += n;
  }
  return out;
}

std::string base64_decode(std::string_view text, const std::string& where) {
  auto sextet = [&](char c) -> std::uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw std::runtime_error(where + " is not base64 (character '" + std::string(1, c) + "')");
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    acc = (acc << 6) | sextet(c);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace fuselm::tokenizer
