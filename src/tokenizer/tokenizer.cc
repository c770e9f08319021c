#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_limited.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_field.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) {
    file = (std::filesystem::path(path) / "tokenizer.json").string();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(file + ": cannot read");
  return from_json(text.str(), file);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = base::parse_json_limited(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
    throw std::runtime_error(source + ": malformed JSON: " + e.what());
  } catch (const base::JsonTooDeep& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
  const Field root(doc, "", source);
  if (!root.is_object()) root.fail("must be a JSON object");

  Tokenizer t;
  t.model_ = make_model(root["model"]);
  if (auto n = root.get("normalizer")) t.normalizer_ = make_normalizer(*n);
  if (auto p = root.get("pre_tokenizer")) t.pre_tokenizer_ = make_pre_tokenizer(*p);
  if (auto p = root.get("post_processor")) t.post_processor_ = make_post_processor(*p);
  t.decoder_ = make_decoder(root.get("decoder"));
  t.added_ = std::make_unique<AddedVocabulary>(root.get("added_tokens"), *t.model_,
                                               t.normalizer_.get());

  t.vocab_size_ = std::max(t.model_->id_bound(), t.added_->id_bound());
  return t;
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!utf8::is_valid(text)) throw std::runtime_error("tokenizer: input text is not valid UTF-8");
  std::vector<std::uint32_t> ids;
  Words words;
  bool first_piece = true;
  for (Piece& piece : added_->split(text)) {
    // Pieces cover the text in order, so only the first one starts at offset 0.
    const bool at_origin = first_piece;
    first_piece = false;
    if (piece.id) {
      ids.push_back(*piece.id);
      continue;
    }
    words.list.clear();
    words.list.push_back(std::move(piece.text));
    words.at_origin = at_origin;
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words);
    for (const std::string& w : words.list) model_->tokenize(w, ids);
  }
  if (post_processor_) post_processor_->process(ids, add_special_tokens);
  return ids;
}

const std::string* Tokenizer::decode_token(std::uint32_t id, bool skip_special_tokens) const {
  const std::string* token = added_->decode_text(id);
  if (token == nullptr) token = model_->id_to_token(id);
  if (token == nullptr) return nullptr;
  if (skip_special_tokens && added_->is_special(*token)) return nullptr;
  return token;
}

std::string Tokenizer::decode(std::span<const std::uint32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::uint32_t id : ids) {
    if (const std::string* t = decode_token(id, skip_special_tokens)) tokens.push_back(*t);
  }
  return utf8::lossy(decode_tokens(*decoder_, std::move(tokens), true));
}

std::string Tokenizer::token_bytes(std::uint32_t id) const {
  const std::string* t = decode_token(id, true);
  if (t == nullptr) return {};
  return decode_tokens(*decoder_, {*t}, false);
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::uint32_t id) const {
  if (const AddedToken* t = added_->find(id)) return t->content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(std::uint32_t id) const {
  const AddedToken* t = added_->find(id);
  return t != nullptr && t->special;
}

}  // namespace fuselm::tokenizer
