#pragma once
// Checkpoint tensors that no IR parameter reads. A config.json with fewer layers (or experts) than
// its checkpoint captures and runs without them: the output is garbage and nothing says so. These
// checks make that visible, and refuse it when the unread tensors look like whole missing blocks.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "weights/checkpoint.h"

namespace fuselm::weights {

/// What find_unused_tensors found. Both lists are sorted.
struct UnusedTensors {
  /// Checkpoint keys that no entry of the IR's parameter table names.
  std::vector<std::string> keys;
  /// The subset that look like whole blocks the graph lacks: the key equals a read key except in
  /// one integer path component ("model.layers.25.mlp.up_proj.weight" against the read
  /// "model.layers.19.mlp.up_proj.weight"), and its integer is beyond the highest read at that
  /// position. Decided by structure only, never by a parameter name.
  std::vector<std::string> beyond_read;
  /// For the first key of beyond_read: the read key with the highest integer at that position.
  std::string highest_read;
};

/// Compares the checkpoint keys every parameter of `parameters` (the IR's table, as
/// load_parameters reads it: each entry's "checkpoint"."keys") names with `checkpoint_keys`.
/// Entries without a keys list are skipped (load_parameters reports them).
UnusedTensors find_unused_tensors(const nlohmann::json& parameters, const std::vector<std::string>& checkpoint_keys);

/// find_unused_tensors against `checkpoint`, then: nothing unread, nothing; unread tensors that
/// are not whole blocks, one "fuselm: warning:" line on stderr with the count and the first names;
/// whole blocks, a WeightsError (one line: the count, the first names, the highest read key, and
/// the way out) unless `allow`, when it is a warning too.
void check_unused_tensors(const nlohmann::json& parameters, const Checkpoint& checkpoint, bool allow);

}  // namespace fuselm::weights
