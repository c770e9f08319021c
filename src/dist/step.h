#pragma once
// The step every rank runs under tensor parallelism. Rank 0 owns the tokenizer, scheduler,
// sampler and server; before each forward it broadcasts the step (token ids, positions, the
// sequence slices and their KV slots); the other ranks receive it and run the same forward on
// their shards, so the collectives inside the graph line up. Sampling happens on rank 0 only
// (every rank ends the forward with the full logits), so no sampling state has to travel.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "runtime/batch.h"

namespace fuselm::dist {

/// One forward's inputs as a follower holds them (slices point into `slots`).
struct Step {
  std::vector<int64_t> ids, positions;
  std::vector<runtime::SequenceSlice> slices;
  std::vector<int32_t> slots;
  /// The batch rows whose logits rank 0 asked for (Model::forward's logit_rows); every rank must
  /// select the same rows, since the LM head's input shape follows them. Absent: all rows.
  std::optional<std::vector<int64_t>> logit_rows;
};

/// Rank 0: sends the step to the other ranks (a no-op at size 1). Collective with receive_step.
void send_step(Communicator& c, std::span<const int64_t> ids, std::span<const int64_t> positions,
               std::span<const runtime::SequenceSlice> slices,
               std::optional<std::span<const int64_t>> logit_rows = std::nullopt);
/// Rank 0: tells the other ranks to leave follow(). Collective with receive_step.
void send_stop(Communicator& c);
/// A follower: the next step from rank 0; false when rank 0 sent stop.
bool receive_step(Communicator& c, Step& out);

/// A follower's loop: runs `forward` on every step rank 0 sends, until it sends stop.
void follow(Communicator& c, const std::function<void(const Step&)>& forward);

}  // namespace fuselm::dist
