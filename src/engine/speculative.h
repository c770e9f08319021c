#pragma once
// Speculative decoding (vLLM's --speculative-method ngram|draft). A drafter (drafter.h) proposes
// up to K tokens to follow a sequence that samples this step; the target model scores them in
// the same forward as the sequence's last token (K + 1 rows through the LM head, over the paged
// KV cache as a multi-token chunk); the longest agreeing prefix is kept, plus the target's own
// token at the first disagreement (or a bonus token when all agree). So one forward emits 1 to
// K + 1 tokens, distributed exactly as plain decoding's (speculative_sampling.h); greedy output is
// token for token that of plain decoding.
//
// Rejected drafts leave no trace: their KV rows lie past Sequence::computed, so no attention reads
// them and the next step overwrites them; blocks wholly past the accepted tokens go back to the
// pool; blocks reach the prefix cache only once full of computed real tokens (publish_full_blocks
// reads Sequence::tokens, which never holds a draft).
//
// Back-off: no drafts while more than `disable_by_batch_size` sequences run (the forward is then
// bound by compute, and verifying K extra rows per sequence costs what it saves), and a sequence
// whose acceptance falls under `min_acceptance` pauses speculating for a number of steps that
// doubles with each failed retry.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/drafter.h"
#include "engine/output_processor.h"
#include "engine/sequence.h"

namespace fuselm::engine {

enum class SpecMethod : unsigned char { none, ngram, draft };

/// "ngram" | "draft" -> the method; throws std::invalid_argument naming --speculative-method.
SpecMethod parse_spec_method(const std::string& name);

struct SpeculativeOptions {
  SpecMethod method = SpecMethod::none;
  int32_t num_tokens = 0;  // K: tokens drafted per step at most (--num-speculative-tokens)
  int32_t ngram_min = 2, ngram_max = 4;  // --ngram-prompt-lookup-min / -max
  /// No drafts while more sequences than this run (--speculative-disable-by-batch-size).
  int32_t disable_by_batch_size = 4;
  /// A sequence whose (exponentially weighted) acceptance falls below this pauses speculating.
  double min_acceptance = 0.3;
  /// SpecMethod::draft: the draft model (same vocabulary as the target), its own KV cache; must
  /// outlive the engine.
  Backend* draft_model = nullptr;
  bool enabled() const { return method != SpecMethod::none; }
};

/// What one verification did (EngineMetrics counts them).
struct SpecCounts {
  int64_t drafts = 0;           // verifications with at least one draft token
  int64_t draft_tokens = 0;     // tokens proposed
  int64_t accepted_tokens = 0;  // of which the target accepted
};

class Speculator {
 public:
  /// Throws std::invalid_argument for K < 1, n-gram bounds out of order, a draft method without a
  /// draft model, or a draft model whose vocabulary differs from `target_vocab` (naming both sizes).
  Speculator(const SpeculativeOptions& options, int64_t target_vocab);

  /// Drafts for the sequences of `batch` that sample this step (all their pending tokens
  /// scheduled, no prompt rows read, no grammar, not paused), at most K each and at most
  /// `token_budget` tokens over the batch beyond its scheduled ones, and within max_tokens, the
  /// context and the KV pool (reserved here; a sequence whose blocks cannot grow drafts nothing).
  /// `running` is the running batch's size (back-off). A drafter that throws drafts nothing.
  void propose(std::span<const ScheduledSeq> batch, int64_t token_budget, int64_t running, int64_t max_context);

  /// The target's logits row j (j = 0 .. draft.size()) of `s`'s verification forward.
  using RowFn = std::function<std::span<const float>(size_t j)>;
  /// Sends one emitted token's step (engine's on-row tail); returns whether `s` has finished.
  using EmitFn = std::function<bool(TokenStep step)>;
  /// Verifies `s`'s drafts against rows 0..draft.size(): emits the accepted drafts and the
  /// target's token after them through `emit`, stopping early when `s` finishes; advances
  /// s.computed over the accepted drafts (whose KV the forward wrote) and frees KV blocks wholly
  /// past them. Clears the drafts.
  SpecCounts verify(Sequence& s, const OutputProcessor& out, const RowFn& row, const EmitFn& emit);

 private:
  bool eligible(const ScheduledSeq& b) const;
  int32_t room(const Sequence& s, int64_t max_context) const;
  void back_off(Sequence& s, int64_t accepted, int64_t drafted) const;

  SpeculativeOptions opt_;
  std::unique_ptr<Drafter> drafter_;
  std::vector<Sequence*> picked_;
  std::vector<int32_t> k_;
  std::vector<float> p_;
};

}  // namespace fuselm::engine
