#pragma once
// A generation request as the scheduler takes it, the events it sends back, and the channel
// between the engine thread and whoever waits for them (an HTTP handler, the chat loop, a test).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace fuselm::engine {

struct Request {
  std::vector<int64_t> prompt_ids;
  int64_t max_tokens = 16;  // generated tokens at most (prompt + max_tokens must fit the context)
  SamplingParams sampling;  // the caller picks a random seed for unseeded requests
  std::vector<std::string> stop;         // stop strings, excluded from the text (needs a tokenizer)
  std::vector<int64_t> stop_token_ids;   // also end the request; the token is counted, not shown
  bool ignore_eos = false;
  bool logprobs = false;  // report each token's logprob (and sampling.top_logprobs alternatives)
};

/// Why a request ended. Only the edges (the server's JSON, generate's --json and stats line) spell
/// it, with openai_name().
enum class FinishReason {
  stop,    // EOS, a stop token id or a stop string
  length,  // max_tokens, or the model's context
  abort,   // cancelled, or the engine shut down
  error,   // the forward failed (Event::error says why)
};

/// "stop", "length", "abort", "error": OpenAI's finish_reason (vLLM's for the last two).
constexpr const char* openai_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
  }
  return "error";
}

/// One generated token as reported.
struct TokenOut {
  int64_t id = 0;
  float logprob = 0.f;
  std::vector<std::pair<int64_t, float>> top;  // when logprobs: alternatives, best first
};

/// What the engine sends per step of a request: the tokens generated since the last event, the
/// text now safe to show, and at the end finished with the reason and counts.
struct Event {
  std::vector<TokenOut> tokens;
  /// On a request's first event when it asked for prompt_logprobs: each prompt token with its
  /// logprob given the tokens before it (the first token's is 0: nothing predicts it).
  std::vector<TokenOut> prompt_logprobs;
  std::string text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::stop;  // when finished
  std::string error;                                // for FinishReason::error
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

/// Wakes one consumer that waits on several streams at once (the choices of one HTTP request):
/// every push to a stream sharing it bumps its epoch. Read epoch(), poll the streams, then wait
/// for a different epoch, so no push between the poll and the wait is missed.
class StreamWaker {
 public:
  uint64_t epoch() {
    std::lock_guard lock(mu_);
    return epoch_;
  }
  /// Waits up to `timeout` for the epoch to move past `seen`; false on timeout.
  bool wait(uint64_t seen, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return epoch_ != seen; });
  }
  void notify() {
    {
      std::lock_guard lock(mu_);
      ++epoch_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t epoch_ = 0;
};

/// The per-request channel. The engine pushes; a consumer pops with a timeout and may cancel,
/// after which the engine frees the request's blocks at its next step and sends a final abort.
/// A stream made with a waker also notifies it on every push.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id, std::shared_ptr<StreamWaker> waker = nullptr) : id_(id), waker_(std::move(waker)) {}
  uint64_t id() const { return id_; }
  /// Waits up to `timeout` for the next event; false on timeout.
  bool next(Event& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  /// Engine side.
  void push(Event e) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
    if (waker_) waker_->notify();
  }

 private:
  uint64_t id_;
  std::shared_ptr<StreamWaker> waker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace fuselm::engine
