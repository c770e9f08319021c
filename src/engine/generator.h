#pragma once
// Generation for one sequence: prefill the prompt in one step, then decode token by token over
// the paged KV cache until EOS, max_tokens or the context limit.
#include <functional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/sampler.h"

namespace fuselm::engine {

struct GenerateRequest {
  std::vector<int64_t> prompt_ids;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  bool stop_at_eos = true;
  /// Asked after each token (and on_token): true ends generation with finish_reason "stop"
  /// (generate --stop matches stop strings in the streamed text with it).
  std::function<bool()> stop_requested;
};

struct GenerateResult {
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;
  std::string finish_reason;  // "stop" (EOS or stop_requested) | "length"
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t pool_allocations_after_first_decode = -1;  // pool allocations made after decode step 1
};

/// Runs one request. on_token (optional) is called after each generated token. Throws
/// std::runtime_error for an empty prompt, a prompt (plus one token) longer than the model's
/// context, or a KV cache too small for it.
/// on_logits (optional) sees every logits row the model produced: one per prompt token, then one
/// per decode step ([vocab] f32, valid during the call); tests compare them with transformers.
GenerateResult generate(Model& model, const GenerateRequest& req,
                        const std::function<void(int64_t token)>& on_token = {},
                        const std::function<void(std::span<const float> row)>& on_logits = {});

}  // namespace fuselm::engine
