#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/regex.h"

namespace fuselm::tokenizer {

AddedVocabulary::AddedVocabulary(const std::optional<Field>& spec, const Model& model,
                                 const Normalizer* normalizer)
    : normalizer_(normalizer) {
  if (!spec) return;
  if (!spec->is_array()) spec->fail("must be an array");
  // HF add_tokens: an existing added or model token keeps its id; new ones take consecutive ids
  // from the model's vocabulary size (the ids written in the file are not used, as in HF).
  auto next_id = static_cast<std::uint32_t>(model.size());
  for (std::size_t i = 0; i < spec->size(); ++i) {
    const Field t = spec->at(i);
    AddedToken tok;
    tok.content = t["content"].str();
    tok.single_word = t.flag("single_word", false);
    tok.lstrip = t.flag("lstrip", false);
    tok.rstrip = t.flag("rstrip", false);
    tok.special = t.flag("special", false);
    tok.normalized = t.flag("normalized", !tok.special);
    if (tok.content.empty()) continue;
    std::uint32_t id;
    if (auto known = token_to_id(tok.content)) {
      id = *known;
    } else if (auto in_model = model.token_to_id(tok.content)) {
      id = *in_model;
    } else {
      id = next_id++;
    }
    if (tok.normalized && normalizer_ != nullptr) {
      std::string n = normalizer_->normalize(tok.content);
      if (n != tok.content) decoded_[id] = std::move(n);
    }
    ids_[tok.content] = id;
    if (tok.special) special_.insert(tok.content);
    tokens_[id] = std::move(tok);
  }
  for (const auto& [id, tok] : tokens_) {
    if (tok.normalized) {
      auto d = decoded_.find(id);
      normalized_trie_.insert(d != decoded_.end() ? d->second : tok.content, id);
    } else {
      raw_trie_.insert(tok.content, id);
    }
  }
}

std::optional<std::uint32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = ids_.find(content);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::find(std::uint32_t id) const {
  auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

std::uint32_t AddedVocabulary::id_bound() const {
  std::uint32_t bound = 0;
  for (const auto& [id, tok] : tokens_) bound = std::max(bound, id + 1);
  return bound;
}

const std::string* AddedVocabulary::decode_text(std::uint32_t id) const {
  if (auto d = decoded_.find(id); d != decoded_.end()) return &d->second;
  const AddedToken* t = find(id);
  return t ? &t->content : nullptr;
}

void AddedVocabulary::Trie::insert(std::string_view pattern, std::uint32_t id) {
  if (!pattern.empty()) first[static_cast<unsigned char>(pattern.front())] = true;
  std::uint32_t node = 0;
  for (unsigned char c : pattern) {
    auto it = nodes[node].next.find(c);
    if (it == nodes[node].next.end()) {
      nodes.emplace_back();
      it = nodes[node].next.emplace(c, static_cast<std::uint32_t>(nodes.size() - 1)).first;
    }
    node = it->second;
  }
  // Two tokens with one pattern: the later wins, like a rebuilt Aho-Corasick map.
  nodes[node].id = id;
}

std::optional<std::tuple<std::size_t, std::size_t, std::uint32_t>> AddedVocabulary::Trie::find(
    std::string_view text, std::size_t from) const {
  for (std::size_t start = from; start < text.size(); ++start) {
    if (!first[static_cast<unsigned char>(text[start])]) continue;
    std::uint32_t node = 0;
    std::optional<std::pair<std::size_t, std::uint32_t>> best;
    for (std::size_t i = start; i < text.size(); ++i) {
      auto it = nodes[node].next.find(static_cast<unsigned char>(text[i]));
      if (it == nodes[node].next.end()) break;
      node = it->second;
      if (nodes[node].id) best = std::make_pair(i + 1, *nodes[node].id);
    }
    if (best) return std::make_tuple(start, best->first, best->second);
  }
  return std::nullopt;
}

void AddedVocabulary::split_on(const Piece& piece, const Trie& trie,
                               std::vector<Piece>& out) const {
  if (piece.id || trie.empty()) {
    if (!piece.text.empty()) out.push_back(piece);
    return;
  }
  // HF AddedVocabulary::find_matches, including where the scan resumes after a match.
  const std::string_view s = piece.text;
  std::size_t start_offset = 0, scan = 0;
  while (auto m = trie.find(s, scan)) {
    auto [start, stop, id] = *m;
    scan = stop;
    const AddedToken& tok = tokens_.at(id);
    if (tok.single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space_length(s.substr(stop));
    stop = std::max(stop, start);
    if (start_offset < start) {
      out.push_back({std::string(s.substr(start_offset, start - start_offset)), {}});
    }
    out.push_back({std::string(s.substr(start, stop - start)), id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({std::string(s.substr(start_offset)), {}});
}

std::vector<Piece> AddedVocabulary::split(std::string_view text) const {
  std::vector<Piece> raw;
  split_on(Piece{std::string(text), {}}, raw_trie_, raw);
  std::vector<Piece> out;
  out.reserve(raw.size());
  for (Piece& p : raw) {
    if (!p.id && normalizer_ != nullptr) p.text = normalizer_->normalize(p.text);
    split_on(p, normalized_trie_, out);
  }
  return out;
}

}  // namespace fuselm::tokenizer
