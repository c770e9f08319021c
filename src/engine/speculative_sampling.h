#pragma once
// The speculative-sampling acceptance rule (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding", and Chen et al. 2023, algorithm 2): a draft token x
// drawn from the drafter's q is accepted with probability min(1, p(x) / q(x)) under the target's
// p; on rejection the token is drawn from norm(max(0, p - q)). The output is then distributed as p
// whatever q is. Point-mass drafts (q one-hot at x) reduce to "draw y from p, accepted when
// y == x", which is how the engine verifies n-gram and greedy drafts (engine/speculative.cc).
#include <cstdint>
#include <random>
#include <span>

namespace fuselm::engine {

struct Verdict {
  int64_t token = 0;      // x when accepted, else the resampled token
  bool accepted = false;
};

/// Judges draft token `x` (in [0, p.size())) against target distribution `p` and draft
/// distribution `q` (both [vocab], each summing to 1; q(x) > 0 since x was drawn from it), with
/// `rng`'s draws. When p <= q everywhere but the draft was still rejected (rounding), the residual
/// is empty and the token is drawn from p itself.
Verdict judge_draft(std::span<const float> p, std::span<const float> q, int64_t x, std::mt19937_64& rng);

/// A token drawn from `probs` ([vocab], summing to 1 up to rounding) with `rng`.
int64_t draw_from(std::span<const float> probs, std::mt19937_64& rng);

}  // namespace fuselm::engine
