#pragma once
// The serving engine: continuous batching over the paged KV cache. It ties three parts together,
// each in its own file: the scheduling policy (scheduler.h: FCFS queue, chunked prefill,
// preemption), batch assembly (batch_builder.h: the flattened model inputs) and output processing
// (output_processor.h: sampling, detokenisation, stop strings, finish reasons). The engine owns
// the thread, request admission, the per-request streams and the metrics. One engine thread runs
// the steps; submit() and the streams are thread-safe. `fuselm serve`, `chat` and `generate` all
// decode through it.
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/batch_builder.h"
#include "engine/metrics.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::engine {

struct EngineOptions {
  int32_t max_num_seqs = 64;              // sequences in the running batch at most
  int64_t max_num_batched_tokens = 512;   // tokens in one forward at most
  int64_t max_waiting = 4096;             // queued requests at most; beyond, submit throws QueueFull
  bool prefix_caching = true;
  /// Speculative decoding (speculative.h); off by default.
  SpeculativeOptions speculative;
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
  /// `backend` must outlive the engine. Throws std::invalid_argument for options out of bounds
  /// (speculative ones included: Speculator).
  Engine(Backend& backend, const tokenizer::Tokenizer* tokenizer, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Starts the engine thread (tests may instead call step() themselves).
  void start();
  /// Queues a request. Throws RequestError: 400 for an empty prompt, an id outside the
  /// vocabulary, prompt + max_tokens past the context or the KV pool, sampling parameters outside
  /// their bounds (sampling_params.h), stop strings without a tokenizer; 503 when the queue is
  /// full or the engine stopped. With `waker`, the stream also notifies it on every event (one
  /// consumer waiting on several streams).
  std::shared_ptr<RequestStream> submit(Request req, std::shared_ptr<StreamWaker> waker = nullptr);
  /// Queues several requests at once, all or none (each checked as submit() does; 503 when the
  /// queue cannot take them all), their streams in order, all notifying `waker` when given.
  /// Requests with the same prompt ids share its KV: the first computes it, the later ones are
  /// admitted once it has and take its full blocks from the prefix cache (with prefix caching on;
  /// counted in EngineMetrics::shared_prompt_tokens). How a request's n choices are generated.
  std::vector<std::shared_ptr<RequestStream>> submit_group(std::vector<Request> reqs, std::shared_ptr<StreamWaker> waker = nullptr);
  /// Runs one scheduling step; false when there was nothing to do.
  bool step();
  /// Stops the thread; with `abort`, in-flight requests end at once (FinishReason::abort), else
  /// the thread first finishes them. New submissions are refused from here on.
  void shutdown(bool abort);
  /// A snapshot of the counters.
  EngineMetrics metrics() const;
  const EngineOptions& options() const { return opt_; }
  /// The model's vocabulary size (token ids are in [0, vocab_size)).
  int64_t vocab_size() const { return backend_.vocab_size(); }
  /// The width of an embedding (the model's final hidden state); 0 when it cannot give them.
  int64_t hidden_size() const { return backend_.exposes_hidden() ? backend_.hidden_size() : 0; }
  /// Tokens the KV pool holds.
  int64_t pool_tokens() const;

 private:
  void check(const Request& req) const;
  std::unique_ptr<Sequence> make_sequence(Request req) const;
  /// The tokens min_tokens holds back: the stop token ids, and EOS unless ignore_eos.
  std::vector<int64_t> end_tokens(const Request& req) const;
  void drain_incoming();
  void reap_cancelled();
  void run_batch(const std::vector<ScheduledSeq>& batch);
  void on_row(Sequence& s, std::span<const float> row);
  /// Sends one sampled token's event and counts it; finishes `s` when the step says so.
  void emit(Sequence& s, TokenStep t);
  /// Verifies `s`'s speculative drafts against logits rows first .. first + drafts.
  void on_draft_rows(Sequence& s, const runtime::Tensor& logits, size_t first);
  void on_prompt_row(Sequence& s, int64_t position, std::span<const float> row);
  void finish_embedding(Sequence& s);
  void finish(Sequence& s, FinishReason reason, const std::string& error = {});
  void count(const ScheduleCounts& c);
  void update_pool_metrics();  // with mu_ held
  void loop();

  Backend& backend_;
  const tokenizer::Tokenizer* tok_;
  EngineOptions opt_;
  Scheduler scheduler_;
  BatchBuilder batch_;
  OutputProcessor output_;
  std::unique_ptr<Speculator> spec_;  // with EngineOptions::speculative

  mutable std::mutex mu_;  // guards incoming_, stopping_, metrics_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  bool stopping_ = false, abort_on_stop_ = false, accepting_ = true;
  uint64_t next_id_ = 1;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace fuselm::engine
