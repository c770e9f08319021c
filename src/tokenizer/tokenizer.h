#pragma once
// The tokenizer facade: a Hugging Face tokenizer.json (BPE, Unigram or WordPiece model) loaded
// into the pipeline
//   added tokens -> normalizer -> pre_tokenizer -> model -> post_processor    (encode)
//   ids -> token strings -> decoder -> UTF-8                                  (decode)
// with the same ids and text as the `tokenizers` library. truncation and padding in the file are
// not applied: the engine owns sequence lengths.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::tokenizer {

class AddedVocabulary;
class Model;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;

class Tokenizer {
 public:
  /// Loads `path`: a tokenizer.json file, or a model directory that contains one. Throws
  /// std::runtime_error "<file>: <field> ..." for unreadable or malformed files and for
  /// unsupported components.
  static Tokenizer from_file(const std::string& path);
  /// Loads tokenizer.json text; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json, const std::string& source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text`. Added and special tokens written in the text become their ids;
  /// `add_special_tokens` applies the post-processor's template (e.g. a leading BOS).
  /// Throws std::runtime_error if `text` is not valid UTF-8. Thread-safe.
  std::vector<std::uint32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// Text of `ids`. Unknown ids are skipped (as in HF); with `skip_special_tokens`, so are special
  /// tokens. Byte sequences that are not valid UTF-8 become U+FFFD.
  std::string decode(std::span<const std::uint32_t> ids, bool skip_special_tokens = false) const;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  /// Token string of `id` (added tokens first, then the model's vocabulary), or nullopt.
  std::optional<std::string> id_to_token(std::uint32_t id) const;
  /// The bytes token `id` adds in the middle of a decoded text (the decoder chain run as a
  /// continuation; not made valid UTF-8: a byte-level token may hold part of a character), or ""
  /// for a special token or an unknown id. What constrained decoding matches grammars against.
  std::string token_bytes(std::uint32_t id) const;
  /// True when `id` is a special added token.
  bool is_special(std::uint32_t id) const;
  /// One past the largest id (model vocabulary and added tokens).
  std::uint32_t vocab_size() const { return vocab_size_; }

 private:
  friend class StreamDecoder;
  Tokenizer();
  // The token string that decoding `id` starts from, or nullptr when the id is unknown or skipped.
  const std::string* decode_token(std::uint32_t id, bool skip_special_tokens) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  std::uint32_t vocab_size_ = 0;
};

}  // namespace fuselm::tokenizer
