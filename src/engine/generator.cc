#include "engine/generator.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/engine.h"
#include "engine/observed_backend.h"

namespace fuselm::engine {
namespace {

// The request as the engine takes it. max_tokens stops at the model's context; the rest of the
// checks (and their messages) are generate's own, made before anything runs.
Request engine_request(Model& model, const GenerateRequest& req) {
  const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
  if (n_prompt == 0) throw std::runtime_error("the prompt is empty");
  if (n_prompt >= model.max_context())
    throw std::runtime_error(fmt::format("the prompt has {} tokens but the model's context is {} tokens", n_prompt,
                                         model.max_context()));
  const int64_t vocab = model.vocab_size();
  for (int64_t id : req.prompt_ids)
    if (id < 0 || id >= vocab)
      throw std::runtime_error(fmt::format("prompt token id {} is outside the vocabulary (0..{})", id, vocab - 1));
  Request r;
  r.prompt_ids = req.prompt_ids;
  r.max_tokens = std::min(req.max_tokens, model.max_context() - n_prompt);
  if (n_prompt + r.max_tokens > model.kv_cache().num_slots())
    throw std::runtime_error(fmt::format("the KV cache cannot hold {} tokens", n_prompt + r.max_tokens));
  r.sampling = req.sampling;
  r.stop = req.stop;
  r.ignore_eos = !req.stop_at_eos;
  r.logprobs = true;  // GenerateResult::logprobs (top_logprobs alternatives only when asked)
  return r;
}

}  // namespace

GenerateResult generate(Model& model, const GenerateRequest& req, const std::function<void(const Event&)>& on_event,
                        const std::function<void(std::span<const float>)>& on_logits) {
  Request r = engine_request(model, req);
  ObservedBackend backend(model, on_logits);
  // One sequence, its prompt in one forward, nothing to share a prefix with.
  // (With speculation the budget also holds the last token and its drafts.)
  EngineOptions options{1, std::max<int64_t>(static_cast<int64_t>(r.prompt_ids.size()), 1 + req.speculative.num_tokens), 1, false};
  options.speculative = req.speculative;
  Engine eng(backend, req.tokenizer, options);
  auto stream = eng.submit(std::move(r));
  GenerateResult res;
  res.token_ids.reserve(req.max_tokens);
  res.logprobs.reserve(req.max_tokens);
  Event e;
  for (;;) {
    // The engine's steps, driven on this thread: `serve` runs the same step() on its engine
    // thread (a thread per call would also start a new OpenMP team per call, inside the timings).
    if (!stream->next(e, std::chrono::milliseconds(0))) {
      const bool ran = eng.step();
      if (!stream->next(e, std::chrono::milliseconds(0))) {
        if (!ran) throw std::runtime_error("the engine cannot schedule the request");
        continue;  // a prefill chunk: no token yet
      }
    }
    for (const auto& t : e.tokens) {
      res.token_ids.push_back(t.id);
      res.logprobs.push_back(t.logprob);
    }
    if (on_event) on_event(e);
    if (e.finished) break;
  }
  const auto end = std::chrono::steady_clock::now();
  eng.shutdown(false);
  if (e.finish_reason == FinishReason::error) throw std::runtime_error(e.error);
  if (e.finish_reason == FinishReason::abort) throw std::runtime_error("the engine stopped the request");
  res.finish_reason = e.finish_reason;
  res.prefill_seconds = backend.first_forward_seconds();
  res.decode_seconds = std::chrono::duration<double>(end - backend.first_forward_end()).count();
  res.pool_allocations_after_first_decode = backend.allocations_after_first_decode();
  const EngineMetrics m = eng.metrics();
  res.spec_drafts = m.spec_drafts;
  res.spec_draft_tokens = m.spec_draft_tokens;
  res.spec_accepted_tokens = m.spec_accepted_tokens;
  return res;
}

}  // namespace fuselm::engine
