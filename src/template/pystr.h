#pragma once
// Python str semantics on UTF-8 text: code point indexing, whitespace, case mapping and the str
// methods chat templates call. Invalid UTF-8 bytes are kept as single code points U+DC80+byte
// (Python's surrogateescape), so nothing is lost.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::tmpl::pystr {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
size_t length(std::string_view s);

/// Python's str.isspace() for one code point.
bool is_space(char32_t c);
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
bool is_lower(std::string_view s);
bool is_upper(std::string_view s);
/// Python str slicing s[start:stop:step] with None as nullopt; step must not be 0.
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
/// The code point at index i (negative from the end), or nullopt when out of range.
std::optional<std::string> at(std::string_view s, int64_t i);
/// Python str.find: code point index or -1.
int64_t find(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

/// Python slice index normalisation (PySlice_AdjustIndices) for a sequence of `len` items.
void adjust_slice(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step,
                  int64_t& first, int64_t& n);

}  // namespace fuselm::tmpl::pystr
