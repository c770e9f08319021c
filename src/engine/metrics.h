#pragma once
// Serving counters and latency histograms, rendered by the server as Prometheus text.
#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "kv/block_pool.h"
#include "kv/state_pool.h"

namespace fuselm::engine {

/// A cumulative-bucket histogram in seconds (Prometheus semantics: bucket i counts values <= bounds[i]).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bound, not cumulative; the +Inf bucket is `count`
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void observe(double v);
};

struct EngineMetrics {
  int64_t running = 0, waiting = 0;
  kv::PoolStats pool;
  std::optional<kv::StateStats> state;  // a stateful model's state slots (docs/recurrent.md)
  int32_t block_size = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0, cached_prompt_tokens = 0;
  int64_t shared_prompt_tokens = 0;  // of the cached ones, shared between a request's choices (n > 1)
  int64_t preemptions = 0, requests_finished = 0, requests_aborted = 0;
  /// Speculative decoding (engine/speculative.h): verifications that had drafts, tokens drafted,
  /// tokens the target accepted (vLLM's spec_decode_num_drafts / _num_draft_tokens /
  /// _num_accepted_tokens). Acceptance rate accepted / drafted; mean accepted length, the tokens
  /// one verification emits, (accepted + drafts) / drafts.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tpot{{0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56}};
  Histogram e2e{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
};

/// Prometheus text exposition of `m`, names prefixed "fuselm:" as vLLM's are "vllm:".
std::string to_prometheus(const EngineMetrics& m, const std::string& model_name);

}  // namespace fuselm::engine
