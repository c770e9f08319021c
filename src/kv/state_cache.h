#pragma once
// Per-sequence recurrent state of the stateful ops (docs/recurrent.md): a conv window, an SSM or
// delta-rule matrix. State i (the op's state_idx) holds floats(i) f32 values per slot; a running
// sequence owns one slot, which serves every state of the graph. Unlike KV rows a state is
// overwritten in place each step, so its size per sequence is fixed, whatever the context length.
#include <cstdint>
#include <memory>
#include <vector>

namespace fuselm::kv {

class StateCache {
 public:
  /// floats_per_state[i]: f32 values of state i per slot (> 0); num_slots: sequences held at once
  /// (> 0). Zero-filled. Throws std::invalid_argument for a size <= 0, std::bad_alloc.
  StateCache(std::vector<int64_t> floats_per_state, int32_t num_slots);

  int num_states() const { return static_cast<int>(floats_.size()); }
  int32_t num_slots() const { return num_slots_; }
  /// f32 values of state `state` per slot.
  int64_t floats(int state) const { return floats_.at(state); }
  /// Bytes of one slot over all states.
  int64_t bytes_per_slot() const { return slot_floats_ * static_cast<int64_t>(sizeof(float)); }
  /// The floats(state) values of state `state` in slot `slot`. Throws std::out_of_range.
  float* at(int state, int32_t slot);
  /// Zeros every state of `slot` (a sequence that starts over). Throws std::out_of_range.
  void clear(int32_t slot);
  /// Copies every state of slot `from` into slot `to` (a forked sequence, a restored checkpoint).
  void copy(int32_t from, int32_t to);

 private:
  std::vector<int64_t> floats_, offset_;  // per state: size and offset within a slot
  int64_t slot_floats_ = 0;
  int32_t num_slots_ = 0;
  std::unique_ptr<float[]> data_;
};

}  // namespace fuselm::kv
