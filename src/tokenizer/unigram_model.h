#pragma once
// tokenizer.json "model" of type Unigram (SentencePiece unigram): a vocabulary of pieces with
// log-probability scores; a word becomes the segmentation of maximal total score (Viterbi), as HF
// tokenizers' Unigram::encode_optimized, with unknown characters fused into one unk token and
// byte_fallback to "<0xXX>" tokens.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_field.h"
#include "tokenizer/model.h"

namespace fuselm::tokenizer {

class UnigramModel final : public Model {
 public:
  /// Loads {"type": "Unigram", "vocab": [[piece, score], ...], "unk_id": n|null,
  /// "byte_fallback": bool}. Throws std::runtime_error naming the field when an entry is not a
  /// [string, number] pair or unk_id is out of range.
  static std::unique_ptr<UnigramModel> load(const Field& spec);

  /// Builds a model directly (for tests): pieces with their scores, ids in order.
  UnigramModel(std::vector<std::pair<std::string, double>> pieces,
               std::optional<std::uint32_t> unk_id, bool byte_fallback);

  /// Appends the ids of the best segmentation of `word`. Throws std::runtime_error when a
  /// character has no piece and the model has no unk_id (HF's MissingUnkId).
  void tokenize(std::string_view word, std::vector<std::uint32_t>& out) const override;
  /// The best segmentation of `word` as piece strings (unknown runs fused), HF's encode.
  std::vector<std::string_view> segment(std::string_view word) const;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(std::uint32_t id) const override;
  std::size_t size() const override { return pieces_.size(); }
  std::uint32_t id_bound() const override { return static_cast<std::uint32_t>(pieces_.size()); }

 private:
  // Calls f(length) for every piece that is a prefix of text, shortest first.
  template <typename F>
  void for_each_prefix(std::string_view text, F&& f) const;

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  Vocab ids_;                            // piece -> id (the last id of a repeated piece)
  std::vector<std::uint32_t> sorted_;    // ids ordered by piece bytes, for prefix search
  std::optional<std::uint32_t> unk_id_;
  bool byte_fallback_ = false;
  double unk_score_ = 0;                 // min score - 10, HF's kUnkPenalty
};

}  // namespace fuselm::tokenizer
