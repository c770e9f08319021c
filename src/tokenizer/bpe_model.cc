#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <queue>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

// Word -> ids cache, as HF's BPE cache: bounded, and only short words.
struct BpeModel::Cache {
  static constexpr std::size_t kCapacity = 10000;
  static constexpr std::size_t kMaxWordLength = 256;
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>> words;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::~BpeModel() = default;

std::unique_ptr<BpeModel> BpeModel::load(const Field& spec) {
  if (auto type = spec.get("type"); type && type->str() != "BPE") {
    throw std::runtime_error(spec.file() + ": model type '" + type->str() + "' is not supported");
  }
  if (!spec.get("type") && !(spec.get("vocab") && spec.get("merges"))) {
    spec.fail("has no type and is not a BPE model (vocab and merges)");
  }
  if (auto dropout = spec.get("dropout");
      dropout && (!dropout->json().is_number() || dropout->json().get<double>() != 0.0)) {
    dropout->fail("is not supported (BPE dropout is for training)");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());

  const Field vocab = spec["vocab"];
  if (!vocab.is_object()) vocab.fail("must be an object of token -> id");
  m->vocab_.reserve(vocab.size());
  m->vocab_r_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.json().items()) {
    if (!id.is_number_unsigned()) Field(id, vocab.path() + "." + token, vocab.file()).u32();
    const std::uint64_t v64 = id.get<std::uint64_t>();
    if (v64 >= 0xFFFFFFFFull) {
      Field(id, vocab.path() + "." + token, vocab.file()).fail("is out of range");
    }
    const auto v = static_cast<std::uint32_t>(v64);
    m->vocab_.emplace(token, v);
    m->vocab_r_.emplace(v, token);
    m->id_bound_ = std::max(m->id_bound_, v + 1);
  }

  if (auto unk = spec.get("unk_token")) {
    m->unk_id_ = m->token_to_id(unk->str());
    if (!m->unk_id_) unk->fail("'" + unk->str() + "' is not in model.vocab");
  }
  m->fuse_unk_ = spec.flag("fuse_unk", false);
  m->byte_fallback_ = spec.flag("byte_fallback", false);
  m->ignore_merges_ = spec.flag("ignore_merges", false);
  if (auto p = spec.get("continuing_subword_prefix")) m->continuing_subword_prefix_ = p->str();
  if (auto s = spec.get("end_of_word_suffix")) m->end_of_word_suffix_ = s->str();

  const Field merges = spec["merges"];
  if (!merges.is_array()) merges.fail("must be an array");
  m->merges_.reserve(merges.size());
  const std::size_t prefix_len = m->continuing_subword_prefix_.size();
  std::uint32_t rank = 0;
  const nlohmann::json& list = merges.json();
  std::string a, b;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    auto entry = [&] { return merges.at(i); };  // for error messages only
    if (e.is_string()) {
      // Legacy form "a b"; "#version" lines of merges.txt are skipped as HF does.
      const std::string& line = e.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const auto sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
        entry().fail("must be two tokens separated by one space, got '" + line + "'");
      }
      a.assign(line, 0, sp);
      b.assign(line, sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      entry().fail("must be a pair [a, b] or \"a b\"");
    }
    const auto a_id = m->token_to_id(a), b_id = m->token_to_id(b);
    if (!a_id || !b_id) entry().fail("'" + (a_id ? b : a) + "' is not in model.vocab");
    if (b.size() < prefix_len) {
      entry().fail("'" + b + "' is shorter than continuing_subword_prefix");
    }
    a.append(b, prefix_len);
    const auto new_id = m->token_to_id(a);
    if (!new_id) entry().fail("merges into '" + a + "', which is not in model.vocab");
    // A pair listed twice keeps its last rank, as HF's map does.
    m->merges_[(static_cast<std::uint64_t>(*a_id) << 32) | *b_id] = Merge{rank, *new_id};
    ++rank;
  }
  return m;
}

std::optional<std::uint32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(std::uint32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < Cache::kMaxWordLength;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::uint32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() < Cache::kCapacity) {
      cache_->words.emplace(std::string(word), std::move(ids));
    }
  }
}

std::vector<std::uint32_t> BpeModel::merge_word(std::string_view word) const {
  // Symbols of a doubly linked list over the word's characters, as HF's Word.
  struct Symbol {
    std::uint32_t id;
    std::int64_t prev, next;
    std::size_t len;  // bytes; 0 marks a symbol merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](std::uint32_t id, std::size_t len) {
    const auto n = static_cast<std::int64_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };

  // A pending unk symbol (fuse_unk grows it over consecutive unknown characters).
  bool has_unk = false;
  std::uint32_t unk_id = 0;
  std::size_t unk_len = 0;
  std::string piece;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = utf8::char_length(word, i);
    const bool is_first = i == 0, is_last = i + n == word.size();
    piece.clear();
    if (!is_first) piece += continuing_subword_prefix_;
    piece.append(word.substr(i, n));
    if (is_last) piece += end_of_word_suffix_;
    i += n;

    if (auto id = token_to_id(piece)) {
      if (has_unk) {
        add(unk_id, unk_len);
        has_unk = false;
      }
      add(*id, n);
      continue;
    }
    if (byte_fallback_) {
      std::vector<std::uint32_t> bytes;
      for (unsigned char c : piece) {
        char code[8];
        std::snprintf(code, sizeof(code), "<0x%02X>", c);
        auto id = token_to_id(code);
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == piece.size()) {
        for (std::uint32_t id : bytes) add(id, 1);
        continue;
      }
    }
    if (unk_id_) {
      if (has_unk && fuse_unk_) {
        unk_len += n;
      } else {
        if (has_unk) add(unk_id, unk_len);
        has_unk = true;
        unk_id = *unk_id_;
        unk_len = n;
      }
    }
  }
  if (has_unk) add(unk_id, unk_len);

  // Merge the lowest-ranked pair first, the leftmost among equal ranks (HF's merge_all).
  struct Candidate {
    std::uint32_t rank;
    std::size_t pos;
    std::uint32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  auto find = [&](std::uint32_t a, std::uint32_t b) -> const Merge* {
    auto it = merges_.find((static_cast<std::uint64_t>(a) << 32) | b);
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, i, m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const auto next_pos = static_cast<std::size_t>(left.next);
    const Symbol right = symbols[next_pos];
    const Merge* current = find(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry

    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<std::size_t>(right.next) < symbols.size()) {
      symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int64_t>(top.pos);
    }
    if (left.prev >= 0) {
      const auto prev = static_cast<std::size_t>(left.prev);
      if (const Merge* m = find(symbols[prev].id, left.id)) queue.push({m->rank, prev, m->new_id});
    }
    if (left.next >= 0) {
      const auto next = static_cast<std::size_t>(left.next);
      if (const Merge* m = find(left.id, symbols[next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
  std::vector<std::uint32_t> ids;
  ids.reserve(symbols.size());
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
  return ids;
}

}  // namespace fuselm::tokenizer
