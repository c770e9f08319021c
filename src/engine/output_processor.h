#pragma once
// Output processing: what becomes of a sequence's logits row. Sampling, detokenisation (the text
// is streamed as it becomes safe to show), stop strings (held back while they could still match,
// as the OpenAI API has it), stop token ids and EOS, and the length limits; it decides when a
// request ends and why. Stateless across sequences: each Sequence carries its own state.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::engine {

/// One sampled token's outcome: the event to send, and the reason when it ends the request.
struct TokenStep {
  Event event;
  std::optional<FinishReason> finish;
  std::string error;  // with FinishReason::error
};

class OutputProcessor {
 public:
  /// `tokenizer` may be null (then events carry no text); it must outlive the processor.
  OutputProcessor(const tokenizer::Tokenizer* tokenizer, std::vector<int64_t> eos_ids, int64_t max_context)
      : tok_(tokenizer), eos_(std::move(eos_ids)), max_context_(max_context) {}

  /// Readies a new sequence: the prompt its penalties cover, its detokeniser.
  void attach(Sequence& s) const;
  /// Samples the next token of `s` from its logits row ([vocab] f32) and appends it. The event
  /// holds the token (with its logprob and alternatives when the request asked for logprobs) and
  /// the text now safe to show; `finish` is stop (EOS unless ignore_eos, a stop token id, a stop
  /// string, a grammar that reached its end) or length (max_tokens, or the model's context); a
  /// constrained sequence samples only the tokens its grammar allows (when it allows none: stop if
  /// the output is complete, else error).
  TokenStep on_row(Sequence& s, std::span<const float> row) const;
  /// As on_row, with `token` taken as the sample instead of drawn (Sampler::take): speculative
  /// decoding's accepted draft or resample (engine/speculative.h). Not for constrained sequences.
  TokenStep on_token(Sequence& s, std::span<const float> row, int64_t token) const;
  /// The text still held back when `s` ends normally (the detokeniser's tail, then whatever the
  /// stop strings held that did not match).
  static std::string flush(Sequence& s);

 private:
  static std::optional<std::string> fill_grammar_mask(Sequence& s, size_t width);
  TokenStep append(Sequence& s, Sampled t) const;

  const tokenizer::Tokenizer* tok_;
  std::vector<int64_t> eos_;
  int64_t max_context_;
};

}  // namespace fuselm::engine
