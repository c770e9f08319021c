#pragma once
// Batch assembly: one step's scheduled sequences flattened into the model's inputs, the token ids
// and positions of every scheduled token ([num_tokens]), one slice per sequence (its rows, KV
// slots and state slot), and the rows whose logits are read: the last row of each sequence that has read all
// its tokens after this step (sampled), and every prompt row of a sequence that reads them
// (prompt logprobs, pooled embeddings: Sequence::reads_prompt_rows). Only they go through the LM
// head. A sequence with speculative drafts (Sequence::spec) has them appended to its slice, each
// with its row (the sampled rows then run from its last token through its last draft).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "runtime/batch.h"

namespace fuselm::engine {

/// What one row of the step's logits is for.
struct RowUse {
  size_t seq = 0;         // index into the step's batch
  int64_t position = 0;   // the row's token position in its sequence
  bool sample = false;    // the sequence's last row (sample its next token); else a prompt row
};

class BatchBuilder {
 public:
  /// Rebuilds the inputs from `batch` (each sequence's KV reserved for its tokens). Buffers are
  /// reused across steps.
  void build(std::span<const ScheduledSeq> batch);
  std::span<const int64_t> ids() const { return ids_; }
  std::span<const int64_t> positions() const { return positions_; }
  std::span<const runtime::SequenceSlice> slices() const { return slices_; }
  /// Batch rows to compute logits for, at least one (a step of prefill chunks only asks for one
  /// row that nobody reads).
  std::span<const int64_t> logit_rows() const { return logit_rows_; }
  /// For each row of logit_rows(), in order, what it is for (none for the unread filler row).
  std::span<const RowUse> uses() const { return uses_; }

 private:
  std::vector<int64_t> ids_, positions_, logit_rows_;
  std::vector<runtime::SequenceSlice> slices_;
  std::vector<RowUse> uses_;
};

}  // namespace fuselm::engine
