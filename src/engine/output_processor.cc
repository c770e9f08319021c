#include "engine/output_processor.h"

#include <algorithm>
#include <string>

namespace fuselm::engine {

void OutputProcessor::attach(Sequence& s) const {
  s.sampler.set_prompt(s.tokens);
  if (tok_) s.decoder.emplace(*tok_, true);
}

std::optional<std::string> OutputProcessor::fill_grammar_mask(Sequence& s, size_t width) {
  grammar::Matcher& m = *s.matcher;
  if (static_cast<size_t>(m.vocab_size()) != width)
    return "the grammar's vocabulary (" + std::to_string(m.vocab_size()) + " tokens) differs from the model's logits (" +
           std::to_string(width) + ")";
  s.grammar_mask.resize(static_cast<size_t>(grammar::bitmask_words(m.vocab_size())));
  m.fill_bitmask(s.grammar_mask);
  // Nothing allowed: a complete output with no stop id to take (a model without EOS ids) ends
  // normally (""); anything else is an error.
  if (std::all_of(s.grammar_mask.begin(), s.grammar_mask.end(), [](int32_t w) { return w == 0; }))
    return m.completed() ? std::string() : std::string("the grammar allows no next token");
  return std::nullopt;
}

TokenStep OutputProcessor::on_row(Sequence& s, std::span<const float> row) const {
  TokenStep out;
  if (s.matcher) {
    if (auto err = fill_grammar_mask(s, row.size())) {
      out.finish = err->empty() ? FinishReason::stop : FinishReason::error;
      out.error = *err;
      return out;
    }
  }
  return append(s, s.sampler.sample(row, s.req.logprobs, s.matcher ? std::span<const int32_t>(s.grammar_mask) : std::span<const int32_t>()));
}

TokenStep OutputProcessor::on_token(Sequence& s, std::span<const float> row, int64_t token) const {
  return append(s, s.sampler.take(row, token, s.req.logprobs));
}

TokenStep OutputProcessor::append(Sequence& s, Sampled t) const {
  TokenStep out;
  s.tokens.push_back(t.token);
  // The mask allowed the token, so the matcher takes it; it ends when it takes a stop id.
  bool grammar_done = false;
  if (s.matcher) {
    if (!s.matcher->accept(static_cast<int32_t>(t.token))) {
      out.finish = FinishReason::error;
      out.error = "the grammar rejected token " + std::to_string(t.token) + " that its mask allowed";
      return out;
    }
    grammar_done = s.matcher->terminated();
  }
  Event& e = out.event;
  if (s.req.logprobs) e.tokens.push_back({t.token, t.logprob, std::move(t.top)});
  else e.tokens.push_back({t.token, 0.f, {}});
  const bool is_eos = !s.req.ignore_eos && std::find(eos_.begin(), eos_.end(), t.token) != eos_.end();
  const auto& stop_ids = s.req.stop_token_ids;
  const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), t.token) != stop_ids.end();
  // The ending token's text is not shown (an EOS or stop id is counted, not printed).
  if (s.decoder && !is_eos && !is_stop_id && !grammar_done) e.text = s.stop.feed(s.decoder->step(static_cast<uint32_t>(t.token)));
  if (is_eos || is_stop_id || grammar_done || s.stop.matched()) out.finish = FinishReason::stop;
  else if (s.num_output() >= s.req.max_tokens || static_cast<int64_t>(s.tokens.size()) >= max_context_)
    out.finish = FinishReason::length;
  return out;
}

std::string OutputProcessor::flush(Sequence& s) {
  std::string text;
  if (s.decoder) text = s.stop.feed(s.decoder->flush());
  return text + s.stop.flush();
}

}  // namespace fuselm::engine
