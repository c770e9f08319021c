#include "engine/speculative.h"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

#include "engine/drafter_model.h"
#include "engine/drafter_ngram.h"
#include "engine/speculative_sampling.h"

namespace fuselm::engine {

SpecMethod parse_spec_method(const std::string& name) {
  if (name == "ngram") return SpecMethod::ngram;
  if (name == "draft") return SpecMethod::draft;
  throw std::invalid_argument("--speculative-method: '" + name + "' is not a method (ngram, draft)");
}

Speculator::Speculator(const SpeculativeOptions& options, int64_t target_vocab) : opt_(options) {
  if (opt_.num_tokens < 1)
    throw std::invalid_argument(fmt::format("--num-speculative-tokens must be >= 1 with --speculative-method, got {}", opt_.num_tokens));
  if (opt_.method == SpecMethod::ngram) {
    drafter_ = std::make_unique<NgramDrafter>(opt_.ngram_min, opt_.ngram_max);
  } else if (opt_.method == SpecMethod::draft) {
    if (!opt_.draft_model) throw std::invalid_argument("--speculative-method draft needs --speculative-model");
    if (opt_.draft_model->vocab_size() != target_vocab)
      throw std::invalid_argument(fmt::format("--speculative-model: the draft model's vocabulary ({} tokens) differs from the target's ({} tokens)",
                                              opt_.draft_model->vocab_size(), target_vocab));
    drafter_ = std::make_unique<ModelDrafter>(*opt_.draft_model);
  } else {
    throw std::invalid_argument("speculative decoding needs a method (ngram, draft)");
  }
}

bool Speculator::eligible(const ScheduledSeq& b) const {
  const Sequence& s = *b.seq;
  // It samples after this step, and nothing needs its rows one at a time (prompt rows, pooling,
  // a grammar's matcher, which cannot take back a token).
  return !s.done && b.tokens == s.pending() && !s.reads_prompt_rows() && !s.pool && !s.matcher && s.kv;
}

int32_t Speculator::room(const Sequence& s, int64_t max_context) const {
  // A verification emits up to draft + 1 tokens: within max_tokens and the context.
  const int64_t left_out = s.req.max_tokens - s.num_output() - 1;
  const int64_t left_ctx = max_context - static_cast<int64_t>(s.tokens.size()) - 1;
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(left_out, left_ctx), 0, opt_.num_tokens));
}

void Speculator::propose(std::span<const ScheduledSeq> batch, int64_t token_budget, int64_t running, int64_t max_context) {
  if (running > opt_.disable_by_batch_size) return;
  for (const auto& b : batch) token_budget -= b.tokens;
  picked_.clear();
  k_.clear();
  for (const auto& b : batch) {
    if (token_budget <= 0) break;
    if (!eligible(b)) continue;
    Sequence& s = *b.seq;
    if (s.spec.pause > 0) {
      --s.spec.pause;
      continue;
    }
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(room(s, max_context), token_budget));
    if (k <= 0) continue;
    if (!s.spec.rng) s.spec.rng.emplace(s.req.sampling.seed ^ 0x9E3779B97F4A7C15ull);
    picked_.push_back(&s);
    k_.push_back(k);
    token_budget -= k;
  }
  if (picked_.empty()) return;
  try {
    drafter_->propose(picked_, k_);
  } catch (const std::exception&) {
    for (Sequence* s : picked_) s->spec.draft.clear();  // decode without drafts this step
  }
  for (size_t i = 0; i < picked_.size(); ++i) {
    Sequence& s = *picked_[i];
    if (s.spec.draft.size() > static_cast<size_t>(k_[i])) s.spec.draft.resize(static_cast<size_t>(k_[i]));
    // Room for the drafts' KV rows past the sequence's own tokens; none when the pool is short
    // (drafts never preempt anyone).
    if (!s.spec.draft.empty() && !s.kv->reserve(static_cast<int64_t>(s.tokens.size() + s.spec.draft.size()))) s.spec.draft.clear();
    if (s.spec.draft.empty()) s.spec.q.clear();
  }
}

void Speculator::back_off(Sequence& s, int64_t accepted, int64_t drafted) const {
  SpecState& st = s.spec;
  const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
  st.acceptance = 0.5 * st.acceptance + 0.5 * rate;
  if (rate >= opt_.min_acceptance) st.next_pause = 4;
  if (st.acceptance >= opt_.min_acceptance) return;
  st.pause = st.next_pause;
  st.next_pause = std::min(st.next_pause * 2, 64);
  st.acceptance = opt_.min_acceptance;  // a retry after the pause starts at the bar
}

SpecCounts Speculator::verify(Sequence& s, const OutputProcessor& out, const RowFn& row, const EmitFn& emit) {
  SpecState& st = s.spec;
  const std::vector<int64_t> draft = std::move(st.draft);
  st.draft.clear();
  const size_t d = draft.size();
  const bool point = st.q.empty();
  const int64_t vocab = d > 0 && !point ? static_cast<int64_t>(st.q.size() / d) : 0;
  int64_t accepted = 0;
  for (size_t j = 0; j <= d; ++j) {
    const std::span<const float> r = row(j);
    TokenStep step;
    bool ok = false;
    if (j == d || point) {  // the target's own sample: equal to a point-mass draft, or the bonus
      step = out.on_row(s, r);
      ok = j < d && !(step.finish && *step.finish == FinishReason::error) && s.tokens.back() == draft[j];
    } else {
      s.sampler.distribution(r, p_);
      const Verdict v = judge_draft(p_, std::span<const float>(st.q).subspan(j * vocab, vocab), draft[j], *st.rng);
      ok = v.accepted;
      step = out.on_token(s, r, v.token);
    }
    if (ok) ++accepted;
    if (emit(std::move(step)) || !ok) break;
  }
  st.q.clear();
  SpecCounts c;
  if (d == 0) return c;
  c = {1, static_cast<int64_t>(d), accepted};
  if (s.done) return c;
  s.computed += accepted;  // their KV rows, written by the verification forward, are the tokens'
  s.kv->truncate(static_cast<int64_t>(s.tokens.size()));
  back_off(s, accepted, static_cast<int64_t>(d));
  drafter_->on_verified(s);
  return c;
}

}  // namespace fuselm::engine
