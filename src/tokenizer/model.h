#pragma once
// tokenizer.json "model": the vocabulary and the algorithm that turns one pre-tokenized word into
// ids. Implemented: BPE (bpe_model.h), Unigram (unigram_model.h), WordPiece (wordpiece_model.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_field.h"

namespace fuselm::tokenizer {

/// Hash that lets unordered maps keyed by std::string be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  /// Appends the ids of `word` (valid UTF-8, one pre-tokenized word) to `out`.
  virtual void tokenize(std::string_view word, std::vector<std::uint32_t>& out) const = 0;
  virtual std::optional<std::uint32_t> token_to_id(std::string_view token) const = 0;
  /// The token string of `id`, or nullptr if the vocabulary has no such id.
  virtual const std::string* id_to_token(std::uint32_t id) const = 0;
  /// Number of vocabulary entries (HF's get_vocab_size without added tokens).
  virtual std::size_t size() const = 0;
  /// One past the largest id in the vocabulary (0 when empty).
  virtual std::uint32_t id_bound() const = 0;
};

/// Builds the model described by `spec` (the "model" object; a missing type means BPE, as in HF).
/// Throws std::runtime_error naming the field for an unsupported type or a malformed vocabulary.
std::unique_ptr<Model> make_model(const Field& spec);

/// The id of the byte-fallback token "<0xXX>" for byte `b`, if the vocabulary has it.
std::optional<std::uint32_t> byte_fallback_id(const Model& model, unsigned char b);

}  // namespace fuselm::tokenizer
