#include "engine/scheduler.h"

#include <algorithm>

namespace fuselm::engine {

void Scheduler::preempt(std::unique_ptr<Sequence> s, ScheduleCounts& counts) {
  // Recompute later: the KV goes, the tokens (and the sampler's state) stay.
  s->kv.reset();
  s->computed = 0;
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
    const int64_t n = std::min<int64_t>(s.pending(), budget);
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
    if (!s.kv) {
      s.kv.emplace(kv_);
      const int64_t total = static_cast<int64_t>(s.tokens.size());
      s.computed = opt_.prefix_caching ? s.kv->match_prefix(s.tokens, total - 1) : 0;
      if (!s.admitted_once) s.cached = s.computed;
    }
    const int64_t n = std::min<int64_t>(s.pending(), budget);
    if (!s.kv->reserve(s.computed + n)) {
      s.kv.reset();  // FCFS: nothing behind it goes first; its prefix blocks stay cached
      s.computed = 0;
      return;
    }
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

void Scheduler::remove_finished() {
  std::erase_if(running_, [](const auto& s) { return s->done; });
  std::erase_if(waiting_, [](const auto& s) { return s->done; });
}

void Scheduler::for_each(const std::function<void(Sequence&)>& f) {
  for (auto& s : running_) f(*s);
  for (auto& s : waiting_) f(*s);
}

}  // namespace fuselm::engine
