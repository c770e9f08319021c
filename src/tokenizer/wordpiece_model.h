#pragma once
// tokenizer.json "model" of type WordPiece (BERT): greedy longest-match-first over the vocabulary,
// pieces after the first carrying continuing_subword_prefix ("##"); a word with any unmatched
// part, or longer than max_input_chars_per_word characters, becomes the one unk token (HF's
// WordPiece::tokenize).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_field.h"
#include "tokenizer/model.h"

namespace fuselm::tokenizer {

class WordPieceModel final : public Model {
 public:
  /// Loads {"type": "WordPiece", "vocab": {token: id}, "unk_token", "continuing_subword_prefix",
  /// "max_input_chars_per_word"}. Throws std::runtime_error naming the field when the unk token
  /// is not in the vocabulary or an id is not a u32.
  static std::unique_ptr<WordPieceModel> load(const Field& spec);

  void tokenize(std::string_view word, std::vector<std::uint32_t>& out) const override;
  std::optional<std::uint32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(std::uint32_t id) const override;
  std::size_t size() const override { return vocab_.size(); }
  std::uint32_t id_bound() const override { return id_bound_; }

 private:
  Vocab vocab_;
  std::unordered_map<std::uint32_t, std::string> vocab_r_;
  std::uint32_t id_bound_ = 0;
  std::uint32_t unk_id_ = 0;
  std::string prefix_ = "##";
  std::size_t max_chars_ = 100;
};

}  // namespace fuselm::tokenizer
