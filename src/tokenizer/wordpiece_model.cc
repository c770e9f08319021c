#include "tokenizer/wordpiece_model.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

std::unique_ptr<WordPieceModel> WordPieceModel::load(const Field& spec) {
  std::unique_ptr<WordPieceModel> m(new WordPieceModel());
  const Field vocab = spec["vocab"];
  if (!vocab.is_object()) vocab.fail("must be an object of token -> id");
  for (const auto& [token, id] : vocab.json().items()) {
    const std::uint32_t v = Field(id, vocab.path() + "." + token, vocab.file()).u32();
    m->vocab_[token] = v;
    m->vocab_r_[v] = token;
    m->id_bound_ = std::max(m->id_bound_, v + 1);
  }
  const Field unk = spec["unk_token"];
  auto unk_id = m->token_to_id(unk.str());
  if (!unk_id) unk.fail("'" + unk.str() + "' is not in model.vocab");
  m->unk_id_ = *unk_id;
  if (auto p = spec.get("continuing_subword_prefix")) m->prefix_ = p->str();
  if (auto n = spec.get("max_input_chars_per_word")) m->max_chars_ = n->u32();
  return m;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (word.empty()) return;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < word.size(); i += utf8::char_length(word, i)) ++chars;
  if (chars > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  std::vector<std::uint32_t> pieces;
  std::string candidate;
  for (std::size_t start = 0; start < word.size();) {
    std::size_t end = word.size();
    std::optional<std::uint32_t> found;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate = prefix_;
      candidate.append(word.substr(start, end - start));
      if (auto id = token_to_id(candidate)) {
        found = id;
        break;
      }
      // Drop the last character of the candidate.
      std::size_t p = end - 1;
      while (p > start && (static_cast<unsigned char>(word[p]) & 0xC0) == 0x80) --p;
      end = p;
    }
    if (!found) {
      out.push_back(unk_id_);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

std::optional<std::uint32_t> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(std::uint32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

}  // namespace fuselm::tokenizer
