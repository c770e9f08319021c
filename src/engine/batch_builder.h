#pragma once
// Batch assembly: one step's scheduled sequences flattened into the model's inputs, the token ids
// and positions of every scheduled token ([num_tokens]), one slice per sequence (its rows and KV
// slots), and the rows whose logits are sampled (the last row of each sequence that has read all
// its tokens after this step; only they go through the LM head).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "runtime/batch.h"

namespace fuselm::engine {

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
  /// For each sampled row r, in order: the index into `batch` of its sequence.
  std::span<const size_t> sampled() const { return sampled_; }

 private:
  std::vector<int64_t> ids_, positions_, logit_rows_;
  std::vector<runtime::SequenceSlice> slices_;
  std::vector<size_t> sampled_;
};

}  // namespace fuselm::engine
