#include "engine/drafter_ngram.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fuselm::engine {

std::vector<int64_t> ngram_lookup(std::span<const int64_t> tokens, int32_t min_n, int32_t max_n, int32_t k) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = max_n; n >= min_n; --n) {
    if (len < n + 1) continue;
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    int64_t best = -1, best_len = 0;
    // Occurrences starting before the suffix itself, most recent first; each is followed by at
    // least one token.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t follow = std::min<int64_t>(k, len - (i + n));
      if (follow > best_len) {
        best = i;
        best_len = follow;
      }
      if (follow == k) break;
    }
    if (best >= 0)
      return {tokens.begin() + best + n, tokens.begin() + best + n + best_len};
  }
  return {};
}

NgramDrafter::NgramDrafter(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n)
    throw std::invalid_argument("--ngram-prompt-lookup-min (" + std::to_string(min_n) + ") must be >= 1 and <= --ngram-prompt-lookup-max (" +
                                std::to_string(max_n) + ")");
}

void NgramDrafter::propose(std::span<Sequence* const> seqs, std::span<const int32_t> k) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    s.spec.draft = ngram_lookup(s.tokens, min_n_, max_n_, k[i]);
    s.spec.q.clear();
  }
}

}  // namespace fuselm::engine
