#pragma once
// The model as a Backend that also reports what `fuselm generate`, `verify` and the decode bench
// print about a lone request: every logits row (optional), the first forward's time (the
// prefill) and the executor pool's allocations after the first decode step.
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"

namespace fuselm::engine {

class ObservedBackend final : public Backend {
 public:
  using RowSink = std::function<void(std::span<const float> row)>;
  /// `m` must outlive this object. With `on_row`, each forward computes the logits of every row
  /// of the batch (the whole LM head, as the graph without row selection) and passes each row
  /// ([vocab] f32, valid during the call) to on_row in batch order; the caller still gets the
  /// rows it asked for, copied out of them.
  explicit ObservedBackend(Model& m, RowSink on_row = {}) : m_(m), on_row_(std::move(on_row)) {}

  const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> sequences,
                                 std::span<const int64_t> logit_rows) override;
  kv::PagedKvCache& kv_cache() override { return m_.kv_cache(); }
  kv::StatePool* state_pool() override { return m_.state_pool(); }
  int64_t max_context() const override { return m_.max_context(); }
  int64_t vocab_size() const override { return m_.vocab_size(); }
  const std::vector<int64_t>& eos_token_ids() const override { return m_.eos_token_ids(); }

  /// Seconds the first forward took (a lone request's prefill); 0 before it.
  double first_forward_seconds() const { return first_seconds_; }
  /// When the first forward ended (the decode's start).
  std::chrono::steady_clock::time_point first_forward_end() const { return first_end_; }
  /// Executor pool allocations made since the second forward (a lone request's first decode
  /// step) ended; -1 with fewer than two forwards. Steady-state decode allocates nothing.
  int64_t allocations_after_first_decode() const;

 private:
  const runtime::Tensor& every_row(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                   std::span<const runtime::SequenceSlice> sequences,
                                   std::span<const int64_t> logit_rows);

  Model& m_;
  RowSink on_row_;
  int64_t forwards_ = 0, allocations_at_first_decode_ = -1;
  double first_seconds_ = 0;
  std::chrono::steady_clock::time_point first_end_;
  std::vector<float> picked_;  // the rows asked for, with on_row
  runtime::Tensor picked_view_;
};

}  // namespace fuselm::engine
