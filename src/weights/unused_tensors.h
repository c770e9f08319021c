#pragma once
// Checkpoint tensors that no IR parameter reads. A config.json with fewer layers (or experts) than
// its checkpoint captures and runs without them: the output is garbage and nothing says so. These
// checks make that visible, and refuse it when the unread tensors look like whole missing blocks.
// Tensors of modules the model itself never reads on token ids alone (a multimodal wrapper's vision
// or audio tower and projector) or within its context (a sparse attention's indexer, whose pick is
// every key there), which capture lists in the IR's model record, are a note instead.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "weights/checkpoint.h"

namespace fuselm::weights {

/// A module of the model whose checkpoint tensors no graph node reads, as capture recorded it
/// (the IR model record's "unread_modules"), with how many of its tensors the checkpoint holds.
struct UnreadModule {
  std::string module;             // the model's module path ("model.vision_tower")
  std::string checkpoint_prefix;  // the prefix its checkpoint keys share ("vision_tower."), or ""
  size_t tensors = 0;
};

/// What find_unused_tensors found. Both key lists are sorted.
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
  /// Modules the model does not read (from `unread_modules`), each with the checkpoint tensors it
  /// accounts for; those tensors are in neither list above.
  std::vector<UnreadModule> unread_modules;
};

/// Compares the checkpoint keys every parameter of `parameters` (the IR's table, as
/// load_parameters reads it: each entry's "checkpoint"."keys") names with `checkpoint_keys`.
/// Entries without a keys list are skipped (load_parameters reports them). `unread_modules` is the
/// IR model record's list ([{"module", "checkpoint_prefix", "keys"}], or null): keys it names are
/// counted per module and are neither unused nor beyond the read blocks.
UnusedTensors find_unused_tensors(const nlohmann::json& parameters, const std::vector<std::string>& checkpoint_keys,
                                  const nlohmann::json& unread_modules = nullptr);

/// find_unused_tensors against `checkpoint`, then: unread modules, one "fuselm: note:" line naming
/// each one's checkpoint prefix and tensor count; nothing else unread, nothing more; unread
/// tensors that are not whole blocks, one "fuselm: warning:" line on stderr with the count and the
/// first names; whole blocks, a WeightsError (one line: the count, the first names, the highest
/// read key, and the way out) unless `allow`, when it is a warning too.
void check_unused_tensors(const nlohmann::json& parameters, const nlohmann::json& unread_modules,
                          const Checkpoint& checkpoint, bool allow);

}  // namespace fuselm::weights
