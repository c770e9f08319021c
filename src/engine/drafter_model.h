#pragma once
// The draft-model drafter (vLLM's `draft` method): a second, smaller or quantized, model with the
// target's vocabulary (for example the target's own weights as Q4_0) proposes K tokens by K
// decode steps of its own, batched over the sequences that speculate. It keeps its own KV cache,
// one handle per sequence (SpecState::draft_kv); SpecState::draft_computed counts the positions
// that hold the sequence's real tokens. Each proposal first catches the draft model up on the
// tokens it has not seen (the whole prompt the first time, then the target's last one or two),
// and after verification the count is rolled back to the accepted tokens: the rejected drafts'
// rows are overwritten by the next catch-up.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/drafter.h"

namespace fuselm::engine {

class ModelDrafter final : public Drafter {
 public:
  /// `draft` must outlive the drafter and have the target's vocabulary (the Speculator checks).
  explicit ModelDrafter(Backend& draft) : m_(draft) {}
  /// Greedy sequences get the draft model's argmax (point masses); sampled ones a token drawn
  /// from the draft model's softmax at the request's temperature, top-k and top-p (no penalties),
  /// its row kept in spec.q for the acceptance rule. A sequence's draft ends early after a token
  /// the draft model itself is unsure of (top probability under kMinConfidence), unless its
  /// drafts for that sequence have mostly been accepted (acceptance at least kTrusted).
  void propose(std::span<Sequence* const> seqs, std::span<const int32_t> k) override;
  void on_verified(Sequence& s) override;

 private:
  /// A draft stops at a token the draft model gives less than this probability.
  static constexpr double kMinConfidence = 0.4;
  /// ... unless the sequence's acceptance (SpecState::acceptance) is at least this.
  static constexpr double kTrusted = 0.8;
  bool catch_up_slice(Sequence& s, int32_t k);
  bool draw(Sequence& s, std::span<const float> row);
  void run(std::span<Sequence* const> seqs, std::span<int32_t> want);

  Backend& m_;
  std::vector<int64_t> ids_, pos_, rows_;
  std::vector<runtime::SequenceSlice> slices_;
  std::vector<Sequence*> active_;
  std::vector<float> q_;
};

}  // namespace fuselm::engine
