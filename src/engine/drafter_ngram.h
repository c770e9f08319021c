#pragma once
// The n-gram prompt-lookup drafter (vLLM's `ngram` method, llama.cpp's lookup decoding): no extra
// model. The sequence's last n tokens (n from max down to min) are looked up in its own prompt
// and output; the tokens that followed their most recent earlier occurrence are the draft. Drafts
// are point masses: the target's own sample accepts or rejects them.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/drafter.h"

namespace fuselm::engine {

/// The tokens that followed the most recent earlier occurrence of the last n tokens of `tokens`,
/// for n = max_n down to min_n (the first n that occurs wins), at most k of them; an occurrence
/// followed by k tokens is preferred to a more recent one followed by fewer. Empty when no n-gram
/// recurs. O(tokens.size() * max_n).
std::vector<int64_t> ngram_lookup(std::span<const int64_t> tokens, int32_t min_n, int32_t max_n, int32_t k);

class NgramDrafter final : public Drafter {
 public:
  /// Throws std::invalid_argument unless 1 <= min_n <= max_n.
  NgramDrafter(int32_t min_n, int32_t max_n);
  void propose(std::span<Sequence* const> seqs, std::span<const int32_t> k) override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace fuselm::engine
