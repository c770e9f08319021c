#include "engine/generator.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace fuselm::engine {

GenerateResult generate(Model& model, const GenerateRequest& req, const std::function<void(int64_t)>& on_token,
                        const std::function<void(std::span<const float>)>& on_logits) {
  using clock = std::chrono::steady_clock;
  const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
  if (n_prompt == 0) throw std::runtime_error("the prompt is empty");
  if (n_prompt >= model.max_context())
    throw std::runtime_error(fmt::format("the prompt has {} tokens but the model's context is {} tokens", n_prompt,
                                         model.max_context()));
  const int64_t vocab = model.vocab_size();
  for (int64_t id : req.prompt_ids)
    if (id < 0 || id >= vocab)
      throw std::runtime_error(fmt::format("prompt token id {} is outside the vocabulary (0..{})", id, vocab - 1));
  const int64_t limit = std::min(n_prompt + req.max_tokens, model.max_context());

  kv::SequenceKv seq;
  if (!seq.reserve(limit, model.kv_cache()))
    throw std::runtime_error(fmt::format("the KV cache cannot hold {} tokens", limit));
  Sampler sampler(req.sampling);
  GenerateResult res;
  res.token_ids.reserve(req.max_tokens);
  res.logprobs.reserve(req.max_tokens);
  std::vector<int64_t> positions(n_prompt);
  for (int64_t i = 0; i < n_prompt; ++i) positions[i] = i;
  runtime::SequenceSlice slice{0, n_prompt, n_prompt, seq.slots()};

  auto t0 = clock::now();
  // Without on_logits only the last prompt row is sampled: only it goes through the LM head.
  const int64_t last_row = n_prompt - 1;
  const runtime::Tensor* logits =
      on_logits ? &model.forward(req.prompt_ids, positions, {&slice, 1})
                : &model.forward(req.prompt_ids, positions, {&slice, 1}, std::span<const int64_t>(&last_row, 1));
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  auto emit_rows = [&](const runtime::Tensor& l, int64_t from) {
    if (!on_logits) return;
    for (int64_t r = from; r < l.shape[1]; ++r)
      on_logits({l.ptr<float>() + r * l.shape[2], static_cast<size_t>(l.shape[2])});
  };
  emit_rows(*logits, 0);
  auto t1 = clock::now();
  int64_t context = n_prompt;
  int64_t token_buf[1], pos_buf[1];
  int64_t allocs_at_step1 = -1;
  res.finish_reason = "length";
  for (int64_t step = 0; step < req.max_tokens; ++step) {
    const int64_t rows = logits->shape[1], width = logits->shape[2];
    const float* last = logits->ptr<float>() + (rows - 1) * width;
    Sampled s = sampler.sample({last, static_cast<size_t>(width)});
    res.token_ids.push_back(s.token);
    res.logprobs.push_back(s.logprob);
    if (on_token) on_token(s.token);
    const auto& eos = model.eos_token_ids();
    if ((req.stop_at_eos && std::find(eos.begin(), eos.end(), s.token) != eos.end()) ||
        (req.stop_requested && req.stop_requested())) {
      res.finish_reason = "stop";
      break;
    }
    if (step + 1 == req.max_tokens || context + 1 > limit) break;
    token_buf[0] = s.token;
    pos_buf[0] = context;
    ++context;
    slice = {0, 1, context, seq.slots()};
    logits = &model.forward({token_buf, 1}, {pos_buf, 1}, {&slice, 1});
    emit_rows(*logits, 0);
    if (step == 0) allocs_at_step1 = model.executor().pool().allocations();
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  if (allocs_at_step1 >= 0) res.pool_allocations_after_first_decode = model.executor().pool().allocations() - allocs_at_step1;
  seq.release(model.kv_cache());
  return res;
}

}  // namespace fuselm::engine
