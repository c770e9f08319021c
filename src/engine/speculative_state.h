#pragma once
// A sequence's speculative-decoding state (engine/speculative.h): the tokens drafted for this
// step, the drafter's probabilities for them, the draft model's KV, and the acceptance history
// that decides when speculation backs off. Kept apart from sequence.h so the speculation code owns
// its fields.
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "kv/sequence_handle.h"

namespace fuselm::engine {

struct SpecState {
  /// This step's drafted tokens, verified by the target in the same forward as the sequence's
  /// last token (positions tokens.size() .. tokens.size() + draft.size() - 1). Empty between steps.
  std::vector<int64_t> draft;
  /// [draft.size(), vocab] f32: the distribution each draft token was drawn from; empty when the
  /// drafts are point masses (n-gram lookup, greedy drafting), when the target's own sample is
  /// compared with the draft.
  std::vector<float> q;
  /// The draft model's KV of this sequence (drafter_model.h) and how many of its positions hold
  /// the sequence's real tokens (the rest are rejected drafts, overwritten on the next catch-up).
  std::optional<kv::SequenceHandle> draft_kv;
  int64_t draft_computed = 0;
  /// Acceptance history (accepted / drafted, exponentially weighted) and the back-off: steps left
  /// without speculation, and the length of the next pause (doubled after each failed retry).
  double acceptance = 1.0;
  int32_t pause = 0, next_pause = 4;
  /// Draws of the draft model's sampling and of the acceptance test, seeded from the request's
  /// seed (apart from the Sampler's own generator).
  std::optional<std::mt19937_64> rng;
};

}  // namespace fuselm::engine
