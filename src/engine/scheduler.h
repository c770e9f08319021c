#pragma once
// The scheduling policy (as vLLM's scheduler): FCFS waiting queue, continuous batching, chunked
// prefill and preemption by recompute. Each step takes the running sequences first (decodes,
// and prefill chunks of sequences still reading their prompt), then waiting ones, within the
// token budget (max_num_batched_tokens) and max_num_seqs. When KV blocks run out the newest
// running sequence is preempted: its blocks are freed and it waits again at the queue's head, to
// be recomputed from its prompt and the tokens it had generated (its sampler state is kept, so
// its text is the same). A sequence whose PromptGate is closed is not admitted (nor anything
// behind it) until the sibling that owns the gate has computed their common prompt.
// A stateful model's sequence (docs/recurrent.md) also holds a state slot from admission until it
// finishes or is preempted (admission waits while none is free). It resumes from the prefix cache
// only as deep as a state checkpoint it finds among the matched blocks, whose state is copied into
// its slot; its prefill chunks end at its checkpoint positions (kv::checkpoint_positions), where
// checkpoint() keeps its state for later prompts. Not thread-safe: the engine thread alone calls it.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "kv/paged_kv_cache.h"
#include "kv/state_pool.h"

namespace fuselm::engine {

struct SchedulerOptions {
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  bool prefix_caching = true;
};

/// What one schedule() did that the engine counts.
struct ScheduleCounts {
  int64_t preemptions = 0;
  int64_t admitted_prompt_tokens = 0;  // prompts admitted for the first time
  int64_t admitted_cached_tokens = 0;  // of which the prefix cache held
  int64_t admitted_shared_tokens = 0;  // of those, taken from a sibling choice's prompt (PromptGate)
};

class Scheduler {
 public:
  /// `kv` (and `states`, a stateful model's slots, else nullptr) must outlive the scheduler.
  Scheduler(kv::PagedKvCache& kv, SchedulerOptions options, kv::StatePool* states = nullptr)
      : kv_(kv), opt_(options), states_(states) {}

  /// Queues a new sequence at the back.
  void add(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }
  /// The step's batch, oldest admission first; empty when nothing can run. Reserves the KV
  /// blocks the scheduled tokens need.
  std::vector<ScheduledSeq> schedule(ScheduleCounts& counts);
  /// After a step computed tokens of `s` (its full blocks published): keeps its state as a
  /// checkpoint when it stands at one of its checkpoint positions. No-op for a stateless model.
  void checkpoint(const Sequence& s);
  /// Drops the sequences marked done (their blocks are already freed).
  void remove_finished();
  /// Calls f on every running, then every waiting sequence.
  void for_each(const std::function<void(Sequence&)>& f);
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }

 private:
  void schedule_running(int64_t& budget, std::vector<ScheduledSeq>& out, ScheduleCounts& counts);
  void admit_waiting(int64_t& budget, std::vector<ScheduledSeq>& out, ScheduleCounts& counts);
  void preempt(std::unique_ptr<Sequence> s, ScheduleCounts& counts);
  bool admit_one(Sequence& s, int64_t budget, int64_t& n);
  int64_t take_cached_prefix(Sequence& s);
  int64_t chunk(const Sequence& s, int64_t budget) const;
  bool checkpointing() const { return states_ && opt_.prefix_caching && states_->checkpoint_capacity() > 0; }

  kv::PagedKvCache& kv_;
  SchedulerOptions opt_;
  kv::StatePool* states_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // oldest admission first
};

}  // namespace fuselm::engine
