#pragma once
// The logprob of a prompt token given the tokens before it, from the logits row of the position
// before it (what echo with logprobs reports, as vLLM's prompt_logprobs): log-softmax of the raw
// logits, the model's own distribution (no penalty, bias or temperature), with the `top` most
// likely alternatives, best first (ties by lower id).
#include <cstdint>
#include <span>

#include "engine/request.h"

namespace fuselm::engine {

/// `row` is [vocab] f32; `token` must be in [0, vocab).
TokenOut prompt_token_logprob(std::span<const float> row, int64_t token, int32_t top);

}  // namespace fuselm::engine
