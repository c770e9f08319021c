#pragma once
// SentencePiece's precompiled normalization rules ("Precompiled" normalizer, the
// precompiled_charsmap of a .model file): a darts-clone double-array trie over UTF-8 keys whose
// values are offsets of NUL-terminated replacements in a strings blob. Applied as HF tokenizers'
// Precompiled::normalize: each extended grapheme cluster shorter than 6 bytes is looked up whole,
// otherwise (or when it misses) each of its characters is; a lookup takes the shortest key that
// is a prefix of the chunk.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::tokenizer {

class PrecompiledCharsmap {
 public:
  /// Parses a charsmap blob: u32 little-endian trie size in bytes, the trie units, then the
  /// replacement strings. Throws std::runtime_error (prefixed with `where`) when the blob is
  /// truncated, the trie is empty or refers outside itself, or a replacement is not UTF-8.
  PrecompiledCharsmap(std::string_view blob, const std::string& where);

  /// The replacement of `chunk` (the value of the shortest trie key that is a prefix of it), or
  /// nullopt when no key is.
  std::optional<std::string_view> transform(std::string_view chunk) const;

  /// Normalizes valid UTF-8 `text` as described above.
  std::string normalize(std::string_view text) const;

 private:
  std::optional<std::uint32_t> shortest_prefix_value(std::string_view key) const;

  std::vector<std::uint32_t> units_;
  std::string normalized_;
};

/// Decodes standard base64 (with or without '=' padding). Throws std::runtime_error prefixed with
/// `where` on a character outside the alphabet.
std::string base64_decode(std::string_view text, const std::string& where);

}  // namespace fuselm::tokenizer
