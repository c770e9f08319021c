#pragma once
// The serving engine: continuous batching over the paged KV cache (as vLLM's scheduler).
// Requests wait in a FCFS queue. Every step forms one flattened token batch from the running
// sequences (decodes, and prefill chunks of sequences still reading their prompt) and then from
// waiting requests, bounded by max_num_batched_tokens and max_num_seqs (chunked prefill: a long
// prompt is read over several steps and never stalls the decodes). When KV blocks run out the
// newest running sequence is preempted: its blocks are freed and it is recomputed later from its
// prompt and the tokens it had generated (its sampler state is kept, so the text is the same).
// One engine thread runs the steps; submit() and the streams are thread-safe.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "kv/sequence_handle.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::engine {

struct EngineOptions {
  int32_t max_num_seqs = 64;              // sequences in the running batch at most
  int64_t max_num_batched_tokens = 512;   // tokens in one forward at most
  int64_t max_waiting = 4096;             // queued requests at most; beyond, submit throws QueueFull
  bool prefix_caching = true;
};

/// A request the engine refuses; `status` is the HTTP status it maps to (400 bad request, 503
/// queue full or shutting down).
struct RequestError : std::runtime_error {
  int status;
  RequestError(int s, const std::string& what) : std::runtime_error(what), status(s) {}
};

class Engine {
 public:
  /// `tokenizer` (may be null: then stop strings are refused and events carry no text) and
  /// `backend` must outlive the engine.
  Engine(Backend& backend, const tokenizer::Tokenizer* tokenizer, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Starts the engine thread (tests may instead call step() themselves).
  void start();
  /// Queues a request. Throws RequestError: 400 for an empty prompt, an id outside the
  /// vocabulary, prompt + max_tokens past the context or the KV pool, bad sampling parameters,
  /// stop strings without a tokenizer; 503 when the queue is full or the engine stopped.
  std::shared_ptr<RequestStream> submit(Request req);
  /// Runs one scheduling step; false when there was nothing to do.
  bool step();
  /// Stops the thread; with `abort`, in-flight requests end at once ("abort"), else the thread
  /// first finishes them. New submissions are refused from here on.
  void shutdown(bool abort);
  /// A snapshot of the counters.
  EngineMetrics metrics() const;
  const EngineOptions& options() const { return opt_; }
  /// Tokens the KV pool holds.
  int64_t pool_tokens() const;

 private:
  struct Sequence;
  void drain_incoming();
  void reap_cancelled();
  bool schedule(std::vector<std::pair<Sequence*, int64_t>>& out);
  bool admit_waiting(int64_t& budget, std::vector<std::pair<Sequence*, int64_t>>& out);
  void preempt(std::unique_ptr<Sequence>& s);
  void run_batch(const std::vector<std::pair<Sequence*, int64_t>>& batch);
  void on_token(Sequence& s, const float* row, int64_t width);
  void finish(Sequence& s, const std::string& reason, const std::string& error = {});
  void remove_finished();
  void loop();

  Backend& backend_;
  const tokenizer::Tokenizer* tok_;
  EngineOptions opt_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // oldest admission first
  std::vector<int64_t> ids_, positions_;
  std::vector<runtime::SequenceSlice> slices_;
  std::vector<int64_t> logit_rows_;  // batch rows sampled this step
  std::vector<size_t> sampling_;     // their sequences (indices into the step's batch)

  mutable std::mutex mu_;  // guards incoming_, stopping_, metrics_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  bool stopping_ = false, abort_on_stop_ = false, accepting_ = true;
  uint64_t next_id_ = 1;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace fuselm::engine
