#pragma once
// One request run to its end on the serving engine (the loop `fuselm serve` runs), for the
// callers that want a lone request and its numbers: `fuselm generate`, `verify`, the decode bench.
// The prompt is read in one forward (no chunking), then one token per step.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "engine/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::engine {

struct GenerateRequest {
  std::vector<int64_t> prompt_ids;
  int64_t max_tokens = 64;  // at most; fewer when the model's context ends first
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<std::string> stop;  // stop strings, excluded from the text (need `tokenizer`)
  /// For the events' text and stop strings; may be null (then events carry no text). Must
  /// outlive the call.
  const tokenizer::Tokenizer* tokenizer = nullptr;
  /// Speculative decoding (engine/speculative.h); off by default.
  SpeculativeOptions speculative;
};

struct GenerateResult {
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;
  FinishReason finish_reason = FinishReason::length;  // stop (EOS or a stop string) | length
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t pool_allocations_after_first_decode = -1;  // pool allocations made after decode step 1
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;  // EngineMetrics' counts
};

/// Runs one request. on_event (optional) sees each of the engine's events as it arrives (the
/// token, the text now safe to show; the last one `finished`). on_logits (optional) sees every
/// logits row the model produced: one per prompt token, then one per decode step ([vocab] f32,
/// valid during the call; called on the engine's thread); tests compare them with transformers.
/// Throws std::runtime_error for an empty prompt, a prompt that fills the model's context, an id
/// outside the vocabulary, a KV cache too small for the request, parameters the engine refuses,
/// or a failed forward.
GenerateResult generate(Model& model, const GenerateRequest& req,
                        const std::function<void(const Event& event)>& on_event = {},
                        const std::function<void(std::span<const float> row)>& on_logits = {});

}  // namespace fuselm::engine
