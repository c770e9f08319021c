#include "engine/output_processor.h"

#include <algorithm>

namespace fuselm::engine {

void OutputProcessor::attach(Sequence& s) const {
  s.sampler.set_prompt(s.tokens);
  if (tok_) s.decoder.emplace(*tok_, true);
}

TokenStep OutputProcessor::on_row(Sequence& s, std::span<const float> row) const {
  Sampled t = s.sampler.sample(row, s.req.logprobs);
  s.tokens.push_back(t.token);
  TokenStep out;
  Event& e = out.event;
  if (s.req.logprobs) e.tokens.push_back({t.token, t.logprob, std::move(t.top)});
  else e.tokens.push_back({t.token, 0.f, {}});
  const bool is_eos = !s.req.ignore_eos && std::find(eos_.begin(), eos_.end(), t.token) != eos_.end();
  const auto& stop_ids = s.req.stop_token_ids;
  const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), t.token) != stop_ids.end();
  // The ending token's text is not shown (an EOS or stop id is counted, not printed).
  if (s.decoder && !is_eos && !is_stop_id) e.text = s.stop.feed(s.decoder->step(static_cast<uint32_t>(t.token)));
  if (is_eos || is_stop_id || s.stop.matched()) out.finish = FinishReason::stop;
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
