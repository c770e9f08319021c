#include "engine/observed_backend.h"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace fuselm::engine {

const runtime::Tensor& ObservedBackend::every_row(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                                  std::span<const runtime::SequenceSlice> sequences,
                                                  std::span<const int64_t> logit_rows) {
  // No logit_rows: the model computes every row, as generate's --logits-out has always written them.
  const runtime::Tensor& all = m_.forward(ids, positions, sequences);
  const int64_t width = all.shape[2];
  for (int64_t r = 0; r < all.shape[1]; ++r) on_row_({all.ptr<float>() + r * width, static_cast<size_t>(width)});
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  picked_.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = logit_rows[r];
    if (src < 0 || src >= all.shape[1]) throw std::out_of_range(fmt::format("logit row {} is outside the batch", src));
    std::copy_n(all.ptr<float>() + src * width, width, picked_.data() + r * width);
  }
  const int64_t shape[3] = {1, rows, width};
  picked_view_ = runtime::Tensor::contiguous_view(picked_.data(), runtime::DType::f32, shape);
  return picked_view_;
}

const runtime::Tensor& ObservedBackend::forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                                std::span<const runtime::SequenceSlice> sequences,
                                                std::span<const int64_t> logit_rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const runtime::Tensor& out =
      on_row_ ? every_row(ids, positions, sequences, logit_rows) : m_.forward(ids, positions, sequences, logit_rows);
  ++forwards_;
  if (forwards_ == 1) {
    first_end_ = std::chrono::steady_clock::now();
    first_seconds_ = std::chrono::duration<double>(first_end_ - t0).count();
  } else if (forwards_ == 2) {
    allocations_at_first_decode_ = m_.executor().pool().allocations();
  }
  return out;
}

int64_t ObservedBackend::allocations_after_first_decode() const {
  if (allocations_at_first_decode_ < 0) return -1;
  return m_.executor().pool().allocations() - allocations_at_first_decode_;
}

}  // namespace fuselm::engine
