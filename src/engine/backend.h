#pragma once
// What the scheduler needs from a model: one forward over a flattened token batch, the KV cache
// it writes, and a few facts. engine::Model is adapted by ModelBackend; tests use a fake.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model.h"
#include "kv/paged_kv_cache.h"
#include "kv/state_pool.h"
#include "runtime/batch.h"
#include "runtime/tensor.h"

namespace fuselm::engine {

class Backend {
 public:
  virtual ~Backend() = default;
  /// Logits [1, rows, vocab] f32 of the batch rows listed in logit_rows (indices into the
  /// batch, at least one), in that order; valid until the next call. May throw.
  virtual const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                         std::span<const runtime::SequenceSlice> sequences,
                                         std::span<const int64_t> logit_rows) = 0;
  /// The final hidden states (the LM head's input) [1, rows, hidden] f32 of the last forward's
  /// logit rows, in the same order; nullptr when the backend cannot expose them (then embedding
  /// requests are refused). Valid until the next forward.
  virtual const runtime::Tensor* hidden_rows() { return nullptr; }
  /// Whether hidden_rows() gives them.
  virtual bool exposes_hidden() const { return false; }
  /// Their width (0 when not exposed).
  virtual int64_t hidden_size() const { return 0; }
  virtual kv::PagedKvCache& kv_cache() = 0;
  /// The recurrent state slots of a stateful model (docs/recurrent.md); nullptr when it keeps none.
  virtual kv::StatePool* state_pool() { return nullptr; }
  virtual int64_t max_context() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual const std::vector<int64_t>& eos_token_ids() const = 0;
};

/// The real model as a Backend (it must outlive this object).
class ModelBackend final : public Backend {
 public:
  explicit ModelBackend(Model& m) : m_(m) {}
  const runtime::Tensor& forward(std::span<const int64_t> ids, std::span<const int64_t> positions,
                                 std::span<const runtime::SequenceSlice> sequences,
                                 std::span<const int64_t> logit_rows) override {
    return m_.forward(ids, positions, sequences, logit_rows);
  }
  const runtime::Tensor* hidden_rows() override { return m_.hidden_rows(); }
  bool exposes_hidden() const override { return m_.exposes_hidden(); }
  int64_t hidden_size() const override { return m_.hidden_size(); }
  kv::PagedKvCache& kv_cache() override { return m_.kv_cache(); }
  kv::StatePool* state_pool() override { return m_.state_pool(); }
  int64_t max_context() const override { return m_.max_context(); }
  int64_t vocab_size() const override { return m_.vocab_size(); }
  const std::vector<int64_t>& eos_token_ids() const override { return m_.eos_token_ids(); }

 private:
  Model& m_;
};

}  // namespace fuselm::engine
