#include "engine/metrics.h"

#include <fmt/core.h>

namespace fuselm::engine {

void Histogram::observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) {
      ++counts[i];
      break;
    }
  sum += v;
  ++count;
}

namespace {

void gauge(std::string& out, const char* name, const char* help, const char* type, const std::string& labels, double v) {
  out += fmt::format("# HELP fuselm:{} {}\n# TYPE fuselm:{} {}\nfuselm:{}{{{}}} {}\n", name, help, name, type, name, labels, v);
}

void histogram(std::string& out, const char* name, const char* help, const std::string& labels, const Histogram& h) {
  out += fmt::format("# HELP fuselm:{} {}\n# TYPE fuselm:{} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += h.counts[i];
    out += fmt::format("fuselm:{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.bounds[i], cum);
  }
  out += fmt::format("fuselm:{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, h.count);
  out += fmt::format("fuselm:{}_sum{{{}}} {}\nfuselm:{}_count{{{}}} {}\n", name, labels, h.sum, name, labels, h.count);
}

// A stateful model's slots beside the KV blocks: sequence slots used / free (free counts the
// checkpoints' slots as kv_blocks_free counts cached blocks), checkpoints, bytes.
void state_gauges(std::string& out, const std::string& l, const kv::StateStats& s) {
  const int32_t total = s.seq_slots + s.checkpoint_slots;
  gauge(out, "state_slots_total", "Recurrent state slots (sequence slots plus prefix-cache checkpoint slots).", "gauge", l,
        total);
  gauge(out, "state_slots_used", "State slots held by running sequences.", "gauge", l, s.seq_used);
  gauge(out, "state_slots_free", "State slots no sequence holds (free or holding a checkpoint).", "gauge", l,
        total - s.seq_used);
  gauge(out, "state_slots_cached", "State slots holding a prefix-cache checkpoint.", "gauge", l, s.checkpoints);
  gauge(out, "state_sequence_slots", "State slots for running sequences (sequences that can run at once).", "gauge", l,
        s.seq_slots);
  gauge(out, "state_slot_bytes", "Bytes of recurrent state per slot (per sequence).", "gauge", l, s.bytes_per_slot);
  gauge(out, "state_bytes_total", "Bytes of all state slots.", "gauge", l, static_cast<double>(s.bytes_per_slot) * total);
  gauge(out, "state_bytes_used", "Bytes of state slots held by running sequences.", "gauge", l,
        static_cast<double>(s.bytes_per_slot) * s.seq_used);
  gauge(out, "state_checkpoint_hits_total", "Requests that resumed from a prefix-cache state checkpoint.", "counter", l,
        s.checkpoint_hits);
  gauge(out, "state_checkpoint_stores_total", "State checkpoints stored.", "counter", l, s.checkpoint_stores);
}

}  // namespace

std::string to_prometheus(const EngineMetrics& m, const std::string& model_name) {
  const std::string l = fmt::format("model_name=\"{}\"", model_name);
  std::string out;
  gauge(out, "num_requests_running", "Requests in the running batch.", "gauge", l, m.running);
  gauge(out, "num_requests_waiting", "Requests waiting to be scheduled.", "gauge", l, m.waiting);
  gauge(out, "kv_blocks_total", "KV cache blocks in the pool.", "gauge", l, m.pool.num_blocks);
  gauge(out, "kv_blocks_used", "KV blocks referenced by sequences.", "gauge", l, m.pool.used);
  gauge(out, "kv_blocks_free", "KV blocks not referenced (free or cached).", "gauge", l, m.pool.free + m.pool.cached);
  gauge(out, "kv_blocks_cached", "Unreferenced KV blocks holding a cached prefix.", "gauge", l, m.pool.cached);
  gauge(out, "kv_block_size", "Tokens per KV block.", "gauge", l, m.block_size);
  if (m.state) state_gauges(out, l, *m.state);
  gauge(out, "prefix_cache_queries_total", "Full blocks looked up in the prefix cache.", "counter", l, m.pool.prefix_queries);
  gauge(out, "prefix_cache_hits_total", "Full blocks found in the prefix cache.", "counter", l, m.pool.prefix_hits);
  gauge(out, "prompt_tokens_total", "Prompt tokens of admitted requests.", "counter", l, m.prompt_tokens);
  gauge(out, "prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.", "counter", l, m.cached_prompt_tokens);
  gauge(out, "prompt_tokens_shared_total", "Prompt tokens a request's later choices (n > 1) took from its first choice's KV blocks.",
        "counter", l, m.shared_prompt_tokens);
  gauge(out, "generation_tokens_total", "Generated tokens.", "counter", l, m.generation_tokens);
  gauge(out, "num_preemptions_total", "Sequences preempted (blocks freed, recomputed later).", "counter", l, m.preemptions);
  gauge(out, "request_success_total", "Requests finished (stop or length).", "counter", l, m.requests_finished);
  gauge(out, "request_aborted_total", "Requests aborted (cancel, disconnect, shutdown, error).", "counter", l, m.requests_aborted);
  gauge(out, "spec_decode_num_drafts_total", "Speculative verifications that had drafted tokens.", "counter", l, m.spec_drafts);
  gauge(out, "spec_decode_num_draft_tokens_total", "Speculative tokens drafted.", "counter", l, m.spec_draft_tokens);
  gauge(out, "spec_decode_num_accepted_tokens_total", "Speculative drafted tokens the target accepted.", "counter", l,
        m.spec_accepted_tokens);
  gauge(out, "spec_decode_acceptance_rate", "Accepted / drafted speculative tokens (0 before any draft).", "gauge", l,
        m.spec_draft_tokens > 0 ? static_cast<double>(m.spec_accepted_tokens) / static_cast<double>(m.spec_draft_tokens) : 0.0);
  gauge(out, "spec_decode_mean_accepted_length",
        "Tokens one speculative verification emits on average: accepted drafts plus the target's own (0 before any draft).",
        "gauge", l,
        m.spec_drafts > 0 ? static_cast<double>(m.spec_accepted_tokens + m.spec_drafts) / static_cast<double>(m.spec_drafts) : 0.0);
  histogram(out, "time_to_first_token_seconds", "Time to first token.", l, m.ttft);
  histogram(out, "time_per_output_token_seconds", "Time per output token after the first.", l, m.tpot);
  histogram(out, "e2e_request_latency_seconds", "End-to-end request latency.", l, m.e2e);
  return out;
}

}  // namespace fuselm::engine
