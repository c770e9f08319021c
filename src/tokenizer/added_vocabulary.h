#pragma once
// tokenizer.json "added_tokens": tokens matched in the raw text before normalization and
// pre-tokenization (special tokens like <|im_start|>, and user-added words), with HF's
// single_word / lstrip / rstrip / normalized / special semantics.
#include <array>
#include <cstdint>
#include <tuple>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/json_field.h"
#include "tokenizer/normalizer.h"

namespace fuselm::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;  // only match when not inside a word
  bool lstrip = false;       // also swallow the whitespace on its left
  bool rstrip = false;       // also swallow the whitespace on its right
  bool normalized = true;    // match against the normalized text rather than the raw text
  bool special = false;      // skipped by decode(skip_special_tokens)
};

/// A piece of the input: text still to be tokenized, or an added token already resolved to `id`.
struct Piece {
  std::string text;
  std::optional<std::uint32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  /// Loads `added_tokens` (an array, may be absent) and assigns ids as HF tokenizers does: the
  /// model's id when the content is in its vocabulary, else the next free id after the model's.
  /// `normalizer` may be null; it must outlive this object.
  AddedVocabulary(const std::optional<Field>& spec, const Model& model,
                  const Normalizer* normalizer);

  /// Splits `text` (valid UTF-8) into pieces: first on non-normalized tokens in the raw text, then
  /// normalizes the remaining pieces and splits them on the normalized tokens. Pieces without an
  /// id hold normalized text; empty pieces are dropped.
  std::vector<Piece> split(std::string_view text) const;

  std::optional<std::uint32_t> token_to_id(std::string_view content) const;
  /// The added token with `id`, or nullptr.
  const AddedToken* find(std::uint32_t id) const;
  /// The text decode uses for added token `id`: its normalized form if it is matched normalized.
  const std::string* decode_text(std::uint32_t id) const;
  /// One past the largest added-token id (0 when there are none).
  std::uint32_t id_bound() const;
  /// True when `token` is the content of a special added token.
  bool is_special(std::string_view token) const { return special_.find(token) != special_.end(); }

 private:
  // Byte trie with leftmost-longest search over one set of patterns.
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, std::uint32_t> next;
      std::optional<std::uint32_t> id;  // token id ending here
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first{};  // bytes that start some pattern
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view pattern, std::uint32_t id);
    // Leftmost-longest match at or after `from`: (start, end, id).
    std::optional<std::tuple<std::size_t, std::size_t, std::uint32_t>> find(std::string_view text,
                                                                            std::size_t from) const;
  };
  void split_on(const Piece& piece, const Trie& trie, std::vector<Piece>& out) const;

  const Normalizer* normalizer_ = nullptr;
  std::unordered_map<std::uint32_t, AddedToken> tokens_;
  Vocab ids_;                                                // content -> id
  std::unordered_map<std::uint32_t, std::string> decoded_;  // id -> normalized content, if changed
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace fuselm::tokenizer
