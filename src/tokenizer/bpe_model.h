#pragma once
// tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the merge loop that turns one
// pre-tokenized word into token ids. Words are cached.
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

class BpeModel final : public Model {
 public:
  /// Loads a BPE "model" object: vocab, merges (as "a b" strings or [a, b] pairs), unk_token,
  /// fuse_unk, byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix.
  /// Throws std::runtime_error naming the field for other model types, dropout, or a merge whose
  /// tokens are not in the vocabulary.
  static std::unique_ptr<BpeModel> load(const Field& spec);

  /// Appends the ids of `word` to `out`. Characters outside the vocabulary become byte-fallback
  /// tokens, the unk token, or nothing (as in HF tokenizers when neither is configured).
  void tokenize(std::string_view word, std::vector<std::uint32_t>& out) const override;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const override;
  /// The token string of `id`, or nullptr if the vocabulary has no such id.
  const std::string* id_to_token(std::uint32_t id) const override;
  /// Number of vocabulary entries (HF's get_vocab_size).
  std::size_t size() const override { return vocab_.size(); }
  /// One past the largest id in the vocabulary (0 when empty).
  std::uint32_t id_bound() const override { return id_bound_; }

  ~BpeModel() override;

 private:
  BpeModel();
  std::vector<std::uint32_t> merge_word(std::string_view word) const;

  struct Merge {
    std::uint32_t rank;
    std::uint32_t new_id;
  };
  Vocab vocab_;
  std::unordered_map<std::uint32_t, std::string> vocab_r_;
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::uint32_t id_bound_ = 0;
  std::optional<std::uint32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace fuselm::tokenizer
