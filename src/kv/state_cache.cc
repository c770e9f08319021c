#include "kv/state_cache.h"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace fuselm::kv {

StateCache::StateCache(std::vector<int64_t> floats_per_state, int32_t num_slots)
    : floats_(std::move(floats_per_state)), num_slots_(num_slots) {
  if (num_slots <= 0) throw std::invalid_argument(fmt::format("a state cache needs slots, got {}", num_slots));
  for (size_t i = 0; i < floats_.size(); ++i) {
    if (floats_[i] <= 0) throw std::invalid_argument(fmt::format("state {} has size {}", i, floats_[i]));
    offset_.push_back(slot_floats_);
    slot_floats_ += floats_[i];
  }
  data_ = std::make_unique<float[]>(static_cast<size_t>(slot_floats_ * num_slots_));
  std::fill_n(data_.get(), slot_floats_ * num_slots_, 0.0f);
}

float* StateCache::at(int state, int32_t slot) {
  if (slot < 0 || slot >= num_slots_) throw std::out_of_range(fmt::format("state slot {} of {}", slot, num_slots_));
  return data_.get() + slot * slot_floats_ + offset_.at(state);
}

void StateCache::clear(int32_t slot) {
  if (floats_.empty()) return;
  std::fill_n(at(0, slot), slot_floats_, 0.0f);
}

void StateCache::copy(int32_t from, int32_t to) {
  if (floats_.empty() || from == to) return;
  std::copy_n(at(0, from), slot_floats_, at(0, to));
}

}  // namespace fuselm::kv
