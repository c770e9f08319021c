#include "engine/drafter_model.h"

#include <algorithm>
#include <cmath>

#include "engine/speculative_sampling.h"

namespace fuselm::engine {
namespace {

// The request's sampling without what depends on the output so far (penalties, bias,
// min_tokens): the draft's distribution only needs to be the one the draft was drawn from.
SamplingParams draft_params(const SamplingParams& p) {
  SamplingParams q;
  q.temperature = p.temperature;
  q.top_k = p.top_k;
  q.top_p = p.top_p;
  q.min_p = p.min_p;
  q.seed = p.seed;
  return q;
}

}  // namespace

bool ModelDrafter::catch_up_slice(Sequence& s, int32_t k) {
  SpecState& st = s.spec;
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  // Positions 0 .. n + k - 2 are written: the tokens, then every draft but the last.
  const int64_t need = n + k - 1;
  if (need > m_.max_context()) return false;
  if (!st.draft_kv) {
    st.draft_kv.emplace(m_.kv_cache());
    st.draft_computed = 0;
  }
  if (!st.draft_kv->reserve(need)) return false;
  const int64_t start = std::min(st.draft_computed, n - 1);
  slices_.push_back({static_cast<int64_t>(ids_.size()), n - start, n, st.draft_kv->slots()});
  for (int64_t p = start; p < n; ++p) {
    ids_.push_back(s.tokens[static_cast<size_t>(p)]);
    pos_.push_back(p);
  }
  rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
  return true;
}

bool ModelDrafter::draw(Sequence& s, std::span<const float> row) {
  SpecState& st = s.spec;
  const auto top = std::max_element(row.begin(), row.end());
  if (s.sampler.greedy()) {
    st.draft.push_back(top - row.begin());
  } else {
    Sampler q(draft_params(s.req.sampling));
    q.distribution(row, q_);
    st.draft.push_back(draw_from(q_, *st.rng));
    st.q.insert(st.q.end(), q_.begin(), q_.end());
  }
  // The draft model's own top probability: below kMinConfidence the next draft would rarely
  // survive, so it is not worth a draft forward (a dynamic draft length). Not for a sequence
  // whose drafts the target has been accepting (kTrusted): its draft model agrees with the target
  // even where both are unsure.
  if (st.acceptance >= kTrusted) return true;
  double z = 0;
  for (float v : row) z += std::exp(static_cast<double>(v - *top));
  return 1.0 / z >= kMinConfidence;
}

void ModelDrafter::run(std::span<Sequence* const> seqs, std::span<int32_t> want) {
  const runtime::Tensor& logits = m_.forward(ids_, pos_, slices_, rows_);
  const int64_t vocab = logits.shape[2];
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    if (!draw(s, {logits.ptr<float>() + static_cast<int64_t>(i) * vocab, static_cast<size_t>(vocab)}))
      want[i] = static_cast<int32_t>(s.spec.draft.size());  // no further draft for it
    s.spec.draft_computed = slices_[i].context_len;
  }
}

void ModelDrafter::propose(std::span<Sequence* const> seqs, std::span<const int32_t> k) {
  ids_.clear();
  pos_.clear();
  rows_.clear();
  slices_.clear();
  active_.clear();
  std::vector<int32_t> want;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->spec.draft.clear();
    seqs[i]->spec.q.clear();
    if (!catch_up_slice(*seqs[i], k[i])) continue;
    active_.push_back(seqs[i]);
    want.push_back(k[i]);
  }
  if (active_.empty()) return;
  run(active_, want);  // the catch-up: each sequence's first draft
  for (int32_t round = 1;; ++round) {
    ids_.clear();
    pos_.clear();
    rows_.clear();
    slices_.clear();
    std::vector<Sequence*> next;
    std::vector<int32_t> next_want;
    for (size_t i = 0; i < active_.size(); ++i) {
      Sequence& s = *active_[i];
      if (round >= want[i]) continue;
      const int64_t p = static_cast<int64_t>(s.tokens.size()) + round - 1;  // the last draft's position
      slices_.push_back({static_cast<int64_t>(ids_.size()), 1, p + 1, s.spec.draft_kv->slots()});
      ids_.push_back(s.spec.draft.back());
      pos_.push_back(p);
      rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
      next.push_back(&s);
      next_want.push_back(want[i]);
    }
    if (next.empty()) return;
    run(next, next_want);
    for (size_t i = 0, j = 0; i < active_.size(); ++i)  // a sequence whose draft stopped keeps its count
      if (j < next.size() && active_[i] == next[j]) want[i] = next_want[j++];
  }
}

void ModelDrafter::on_verified(Sequence& s) {
  // Positions past the last accepted token hold a rejected draft (or nothing yet).
  s.spec.draft_computed = std::min(s.spec.draft_computed, static_cast<int64_t>(s.tokens.size()) - 1);
}

}  // namespace fuselm::engine
