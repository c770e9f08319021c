#include "engine/batch_builder.h"

namespace fuselm::engine {

void BatchBuilder::build(std::span<const ScheduledSeq> batch) {
  ids_.clear();
  positions_.clear();
  slices_.clear();
  logit_rows_.clear();
  uses_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& s = *batch[i].seq;
    const int64_t n = batch[i].tokens;
    const bool last = s.computed + n == static_cast<int64_t>(s.tokens.size());
    // Speculative drafts (engine/speculative.h) follow the last token in the same slice.
    const int64_t d = last ? static_cast<int64_t>(s.spec.draft.size()) : 0;
    slices_.push_back({static_cast<int64_t>(ids_.size()), n + d, s.computed + n + d, s.kv->slots()});
    const bool prompt_rows = s.reads_prompt_rows();
    for (int64_t p = s.computed; p < s.computed + n; ++p) {
      ids_.push_back(s.tokens[p]);
      positions_.push_back(p);
      if (prompt_rows && p < s.num_prompt && !(last && p == s.computed + n - 1)) {
        logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
        uses_.push_back({i, p, false});
      }
    }
    // Only a sequence that has read all its tokens after this step samples: its last row goes
    // through the LM head (with the prompt rows it reads).
    if (last) {
      logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
      uses_.push_back({i, s.computed + n - 1, true});
    }
    for (int64_t j = 0; j < d; ++j) {  // each draft's row scores the token after it
      ids_.push_back(s.spec.draft[static_cast<size_t>(j)]);
      positions_.push_back(s.computed + n + j);
      logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
      uses_.push_back({i, s.computed + n + j, true});
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) slices_[i].state_slot = batch[i].seq->state_slot();  // -1: stateless
  if (logit_rows_.empty()) logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);  // one row, unread
}

}  // namespace fuselm::engine
