#pragma once
// What proposes the tokens speculative decoding verifies (engine/speculative.h): the n-gram prompt
// lookup (drafter_ngram.h) or a draft model (drafter_model.h).
#include <cstdint>
#include <span>

#include "engine/sequence.h"

namespace fuselm::engine {

class Drafter {
 public:
  virtual ~Drafter() = default;
  /// Proposes at most k[i] tokens to follow seqs[i]->tokens into seqs[i]->spec.draft (fewer, or
  /// none, when it has no guess) and, for drafts drawn from a distribution rather than fixed,
  /// that distribution's rows into spec.q ([draft.size(), vocab] f32). May throw (a failed draft
  /// forward); the engine then decodes without drafts.
  virtual void propose(std::span<Sequence* const> seqs, std::span<const int32_t> k) = 0;
  /// After the target verified `s`'s drafts: s.tokens holds the accepted ones and the target's
  /// own next token. A drafter that keeps state per sequence rolls it back here.
  virtual void on_verified(Sequence& s) { (void)s; }
};

}  // namespace fuselm::engine
