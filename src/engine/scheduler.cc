#include "engine/scheduler.h"

#include <algorithm>

namespace fuselm::engine {

void Scheduler::preempt(std::unique_ptr<Sequence> s, ScheduleCounts& counts) {
  // Recompute later: the KV goes, the tokens (and the sampler's state) stay.
  s->kv.reset();
  s->state.reset();  // recomputed from position 0, where the ops start from zeros
  s->computed = 0;
  if (s->pool) s->pool->reset();  // its prompt rows are pooled again
  waiting_.push_front(std::move(s));
  ++counts.preemptions;
}

std::vector<ScheduledSeq> Scheduler::schedule(ScheduleCounts& counts) {
  std::vector<ScheduledSeq> out;
  int64_t budget = opt_.max_num_batched_tokens;
  const int64_t before = counts.preemptions;
  schedule_running(budget, out, counts);
  // A step that preempted admits nothing: the freed blocks go to the running sequences first.
  if (counts.preemptions == before) admit_waiting(budget, out, counts);
  return out;
}

void Scheduler::schedule_running(int64_t& budget, std::vector<ScheduledSeq>& out, ScheduleCounts& counts) {
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t n = chunk(s, budget);
    if (n <= 0) continue;
    bool fits = s.kv->reserve(s.computed + n);
    while (!fits && running_.size() - 1 > i) {  // preempt the newest other sequence
      preempt(std::move(running_.back()), counts);
      running_.pop_back();
      fits = s.kv->reserve(s.computed + n);
    }
    if (!fits) {  // it is the newest itself
      preempt(std::move(running_[i]), counts);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    out.push_back({&s, n});
    budget -= n;
  }
}

void Scheduler::admit_waiting(int64_t& budget, std::vector<ScheduledSeq>& out, ScheduleCounts& counts) {
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < opt_.max_num_seqs) {
    Sequence& s = *waiting_.front();
    if (s.gated()) return;  // FCFS: it waits for its prompt's owner, and nothing behind it goes first
    int64_t n = 0;
    if (!admit_one(s, budget, n)) return;  // FCFS: nothing behind it goes first
    if (!s.admitted_once) {
      s.admitted_once = true;
      counts.admitted_prompt_tokens += s.num_prompt;
      counts.admitted_cached_tokens += s.cached;
      if (s.gate && !s.gate_owner) counts.admitted_shared_tokens += s.cached;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    out.push_back({running_.back().get(), n});
    budget -= n;
  }
}

// Gives s its state slot, its cached prefix and the KV blocks for its first `n` tokens; false
// (s holding nothing) when a slot or blocks are missing.
bool Scheduler::admit_one(Sequence& s, int64_t budget, int64_t& n) {
  if (states_ && !s.state) {
    const int32_t slot = states_->allocate();
    if (slot < 0) return false;  // every state slot is held by a running sequence
    s.state.emplace(*states_, slot);
  }
  if (!s.kv) {
    s.kv.emplace(kv_);
    s.computed = take_cached_prefix(s);
    if (!s.admitted_once) s.cached = s.computed;
  }
  n = chunk(s, budget);
  if (s.kv->reserve(s.computed + n)) return true;
  s.kv.reset();  // its prefix blocks stay cached
  s.state.reset();
  s.computed = 0;
  return false;
}

// The cached prefix s starts from (prefix caching on, no prompt row read): its full blocks, and
// for a stateful model only as many as the deepest state checkpoint among them covers (KV without
// the matching state would be wrong), that state copied into s's slot.
int64_t Scheduler::take_cached_prefix(Sequence& s) {
  if (!opt_.prefix_caching || s.reads_prompt_rows()) return 0;
  const int64_t got = s.kv->match_prefix(s.tokens, static_cast<int64_t>(s.tokens.size()) - 1);
  if (!states_ || got == 0) return got;
  const int64_t bs = kv_.block_size();
  const int64_t blocks = states_->restore_deepest(s.kv->block_keys(), got / bs, s.state->slot());
  s.kv->keep_leading_blocks(static_cast<size_t>(blocks));
  return blocks * bs;
}

// Tokens of s to compute now: its pending ones within `budget`; with state checkpoints a prompt
// chunk ends at the next checkpoint position, so that its state there exists after the step.
int64_t Scheduler::chunk(const Sequence& s, int64_t budget) const {
  const int64_t n = std::min<int64_t>(s.pending(), budget);
  if (!checkpointing() || s.computed >= s.num_prompt) return n;
  for (int64_t p : kv::checkpoint_positions(s.num_prompt, kv_.block_size()))
    if (p > s.computed && p < s.computed + n) return p - s.computed;
  return n;
}

void Scheduler::checkpoint(const Sequence& s) {
  const int64_t bs = kv_.block_size();
  if (!checkpointing() || s.done || !s.state || !s.kv || s.computed % bs != 0 || s.computed >= s.num_prompt) return;
  const auto positions = kv::checkpoint_positions(s.num_prompt, kv_.block_size());
  if (std::find(positions.begin(), positions.end(), s.computed) == positions.end()) return;
  const auto& keys = s.kv->block_keys();
  const auto b = static_cast<size_t>(s.computed / bs);
  if (b == 0 || keys.size() < b) return;  // its blocks are not published (prefix caching off)
  states_->store(keys[b - 1], s.state->slot());
}

void Scheduler::remove_finished() {
  std::erase_if(running_, [](const auto& s) { return s->done; });
  std::erase_if(waiting_, [](const auto& s) { return s->done; });
}

void Scheduler::for_each(const std::function<void(Sequence&)>& f) {
  for (auto& s : running_) f(*s);
  for (auto& s : waiting_) f(*s);
}

}  // namespace fuselm::engine
