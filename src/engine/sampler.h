#pragma once
// Token sampling from one row of logits: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties (as vLLM applies them), seeded, with top logprobs.
#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace fuselm::engine {


struct Sampled {
  int64_t token = 0;
  float logprob = 0.f;  // log-softmax of the raw logits at `token`
  std::vector<std::pair<int64_t, float>> top;  // top_logprobs most likely (raw), best first
};

/// Samples with its own generator seeded from params.seed, so a sequence's text does not depend
/// on what else is in the batch; buffers are reused across calls, so steady-state sampling
/// allocates nothing. Each sample() counts its token as output for the penalties. Throws
/// std::invalid_argument (naming the parameter) for parameters outside their bounds (validate()).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  /// The prompt tokens the repetition penalty also covers (call before the first sample()).
  void set_prompt(std::span<const int64_t> prompt);
  /// The tokens that end a request (EOS, stop token ids), masked while fewer than
  /// params().min_tokens tokens have been sampled (sampler_bias.cc).
  void set_end_tokens(std::vector<int64_t> ids) { end_tokens_ = std::move(ids); }
  /// The next token. With `logprobs` false the caller reads only the token: the log-softmax over
  /// the vocabulary (a pass of exponentials, the largest cost of a greedy step) is skipped and
  /// logprob and top stay empty. `allowed` (constrained decoding), when not empty, is a token
  /// bitmask (bit id%32 of word id/32, grammar::bitmask_words words): only the tokens it allows
  /// are sampled, while logprob and top stay those of the model's raw distribution.
  Sampled sample(std::span<const float> logits, bool logprobs = true, std::span<const int32_t> allowed = {});
  /// The distribution sample() draws from for this row ([vocab] into `out`, summing to 1): the
  /// penalties, logit_bias, min_tokens, temperature, top-k, top-p and min-p applied (no grammar
  /// mask); one-hot at the argmax when greedy(). Draws nothing and counts nothing (speculative
  /// verification, engine/speculative_sampling.h).
  void distribution(std::span<const float> logits, std::vector<float>& out);
  /// Takes `token` as this step's output without drawing (a speculative draft the target
  /// accepted, or its resample): counts it as sample() does and gives its logprob and alternatives.
  Sampled take(std::span<const float> logits, int64_t token, bool logprobs = true);
  /// Whether sampling is the argmax (temperature 0 or top_k 1).
  bool greedy() const;
  const SamplingParams& params() const { return p_; }

 private:
  bool penalized() const;
  int64_t draw_untruncated(std::span<const float> logits, float max);
  std::span<const float> apply_penalties(std::span<const float> logits);
  // logit_bias and min_tokens (sampler_bias.cc): whether they change this step's logits, and the
  // logits with them applied (in work_).
  bool biased() const;
  std::span<const float> apply_bias(std::span<const float> logits);
  std::span<const float> apply_mask(std::span<const float> logits, std::span<const int32_t> allowed);
  void fill_top(std::span<const float> raw, double log_z, Sampled& out);
  static double log_normalizer(std::span<const float> raw);
  Sampled commit(std::span<const float> raw, double log_z, int64_t t, bool logprobs);
  // The logits sampling sees (penalties, bias, mask applied), and the top-k/top-p/min-p cut of
  // them: order_/probs_[0, keep) with their sum.
  std::span<const float> processed(std::span<const float> raw, std::span<const int32_t> allowed);
  int64_t truncate(std::span<const float> logits, float max, double& sum);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<float> probs_, work_;
  std::vector<int64_t> prompt_;
  std::unordered_map<int64_t, int32_t> output_counts_;
  std::vector<int64_t> end_tokens_;
  int64_t sampled_ = 0;  // tokens sampled so far (min_tokens)
};

}  // namespace fuselm::engine
