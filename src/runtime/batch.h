#pragma once
// What attention needs to know about the flattened token batch: which tokens belong to which
// sequence and where each sequence's context lives in the KV cache. The graph itself only sees
// [1, num_tokens, ...] tensors.
#include <cstdint>
#include <span>

namespace fuselm::kv {
class PagedKvCache;
class StateCache;
}

namespace fuselm::runtime {

struct SequenceSlice {
  int64_t first_token = 0;   // index of the sequence's first new token in the batch
  int64_t num_tokens = 0;    // new tokens this step (prompt chunk, or 1 when decoding)
  int64_t context_len = 0;   // positions in the cache after this step, new tokens included
  const int32_t* slots = nullptr;  // KV slot of positions 0 .. context_len-1
  /// The sequence's slot in the StateCache (stateful ops, docs/recurrent.md); -1: none. A stateful
  /// op takes the slot's contents as the state after position context_len - num_tokens, and
  /// zeros when that is 0 (a sequence's first step, or its recompute after preemption).
  int32_t state_slot = -1;
};

struct Batch {
  std::span<const SequenceSlice> sequences;
  kv::PagedKvCache* kv = nullptr;
  /// Per-sequence recurrent states (nullptr when the graph has no stateful op).
  kv::StateCache* state = nullptr;
  /// Rows of the token batch whose logits the step needs, in the order wanted: fuselm.select_rows
  /// (inserted before the LM head, passes/logit_rows.h) keeps only these. All rows when
  /// `select_rows` is false (perplexity and logit-parity runs read every row).
  bool select_rows = false;
  std::span<const int64_t> logit_rows;
};

}  // namespace fuselm::runtime
