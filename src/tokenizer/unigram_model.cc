#include "tokenizer/unigram_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {

// HF's K_UNK_PENALTY: an unknown character scores this far below the worst piece.
constexpr double kUnkPenalty = 10.0;

namespace {

// The score HF holds for a JSON number: serde_json without float_roundtrip reads the decimal
// digits as a u64 significand s and exponent e and computes s as f64 times or divided by 10^|e|,
// which can be one ulp off the correctly rounded value nlohmann gives. Scores tie often (runs of
// "▁"), so that ulp decides segmentations. The digits are recovered as the shortest round-trip
// form of the value, which is what serde_json (ryu) and Python write.
double serde_json_f64(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string_view text(buf, static_cast<std::size_t>(r.ptr - buf));  // -d.ddde-XX
  const std::size_t e_pos = text.find('e');
  std::uint64_t significand = 0;
  int digits = 0;
  for (char c : text.substr(0, e_pos)) {
    if (c >= '0' && c <= '9') {
      significand = significand * 10 + static_cast<std::uint64_t>(c - '0');
      ++digits;
    }
  }
  int exponent = std::stoi(std::string(text.substr(e_pos + 1))) - (digits - 1);
  auto pow10 = [](int k) { return std::strtod(("1e" + std::to_string(k)).c_str(), nullptr); };
  double f = static_cast<double>(significand);
  while (exponent < -308) {
    if (f == 0) break;
    f /= 1e308;
    exponent += 308;
  }
  f = exponent >= 0 ? f * pow10(exponent) : f / pow10(-exponent);
  return v < 0 ? -f : f;
}

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces,
                           std::optional<std::uint32_t> unk_id, bool byte_fallback)
    : unk_id_(unk_id), byte_fallback_(byte_fallback) {
  pieces_.reserve(pieces.size());
  scores_.reserve(pieces.size());
  double min_score = std::numeric_limits<double>::infinity();
  for (auto& [piece, score] : pieces) {
    ids_[piece] = static_cast<std::uint32_t>(pieces_.size());
    pieces_.push_back(std::move(piece));
    scores_.push_back(score);
    min_score = std::min(min_score, score);
  }
  unk_score_ = min_score - kUnkPenalty;
  // One entry per distinct piece (the trie of HF holds each key once).
  sorted_.reserve(ids_.size());
  for (const auto& [piece, id] : ids_) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return pieces_[a] < pieces_[b]; });
}

std::unique_ptr<UnigramModel> UnigramModel::load(const Field& spec) {
  const Field vocab = spec["vocab"];
  if (!vocab.is_array()) vocab.fail("must be an array of [piece, score]");
  std::vector<std::pair<std::string, double>> pieces;
  pieces.reserve(vocab.size());
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    const Field e = vocab.at(i);
    const nlohmann::json& j = e.json();
    if (!j.is_array() || j.size() != 2 || !j[0].is_string() || !j[1].is_number()) {
      e.fail("must be a pair [piece, score]");
    }
    pieces.emplace_back(j[0].get<std::string>(), serde_json_f64(j[1].get<double>()));
  }
  std::optional<std::uint32_t> unk_id;
  if (auto u = spec.get("unk_id")) {
    unk_id = u->u32();
    if (*unk_id >= pieces.size()) u->fail("is not an id of model.vocab");
  }
  return std::make_unique<UnigramModel>(std::move(pieces), unk_id,
                                        spec.flag("byte_fallback", false));
}

template <typename F>
void UnigramModel::for_each_prefix(std::string_view text, F&& f) const {
  // sorted_[lo, hi) holds the pieces that start with text[0, k); narrow it one byte at a time.
  auto lo = sorted_.begin(), hi = sorted_.end();
  for (std::size_t k = 0; k < text.size() && lo != hi; ++k) {
    const auto c = static_cast<unsigned char>(text[k]);
    // Byte k of a piece, or -1 when the piece is exactly k bytes (it sorts first in the range).
    auto byte_at = [&](std::uint32_t id) -> int {
      const std::string& p = pieces_[id];
      return p.size() > k ? static_cast<unsigned char>(p[k]) : -1;
    };
    lo = std::partition_point(lo, hi, [&](std::uint32_t id) { return byte_at(id) < c; });
    hi = std::partition_point(lo, hi, [&](std::uint32_t id) { return byte_at(id) == c; });
    if (lo != hi && pieces_[*lo].size() == k + 1) f(k + 1);
  }
}

std::vector<std::string_view> UnigramModel::segment(std::string_view word) const {
  struct Node {
    std::uint32_t id = 0;
    double score = 0;
    std::optional<std::size_t> starts_at;
  };
  const std::size_t size = word.size();
  std::vector<Node> best(size + 1);
  for (std::size_t start = 0; start < size;) {
    const double here = best[start].score;
    const std::size_t mblen = utf8::char_length(word, start);
    bool has_single_node = false;
    for_each_prefix(word.substr(start), [&](std::size_t length) {
      Node& target = best[start + length];
      const std::uint32_t id = ids_.find(word.substr(start, length))->second;
      const double candidate = scores_[id] + here;
      if (!target.starts_at || candidate > target.score) target = {id, candidate, start};
      if (length == mblen) has_single_node = true;
    });
    if (!has_single_node) {
      if (!unk_id_) {
        throw std::runtime_error("tokenizer: Unigram model has no unk_id for a character of '" +
                                 std::string(word) + "'");
      }
      Node& target = best[start + mblen];
      const double candidate = unk_score_ + here;
      if (!target.starts_at || candidate > target.score) target = {*unk_id_, candidate, start};
    }
    start += mblen;
  }
  // Walk back from the end; consecutive unk nodes fuse into one piece (fuse_unk is always on).
  std::vector<std::string_view> pieces;
  std::size_t end = size, unk_end = 0;
  bool in_unk = false;
  while (end > 0) {
    const Node& node = best[end];
    const std::size_t start = *node.starts_at;
    const bool is_unk = unk_id_ && node.id == *unk_id_;
    if (in_unk && !is_unk) {
      pieces.push_back(word.substr(end, unk_end - end));
      in_unk = false;
    }
    if (is_unk) {
      if (!in_unk) unk_end = end;
      in_unk = true;
    } else {
      pieces.push_back(word.substr(start, end - start));
    }
    end = start;
  }
  if (in_unk) pieces.push_back(word.substr(0, unk_end));
  std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

void UnigramModel::tokenize(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (word.empty()) return;
  for (std::string_view piece : segment(word)) {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<std::uint32_t> bytes;
      for (unsigned char b : piece) {
        auto id = byte_fallback_id(*this, b);
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_id_) throw std::runtime_error("tokenizer: Unigram model has no unk_id");
    out.push_back(*unk_id_);
  }
}

std::optional<std::uint32_t> UnigramModel::token_to_id(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::id_to_token(std::uint32_t id) const {
  return id < pieces_.size() ? &pieces_[id] : nullptr;
}

}  // namespace fuselm::tokenizer
