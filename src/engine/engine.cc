#include "engine/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

namespace fuselm::engine {

using clock_type = std::chrono::steady_clock;

struct Engine::Sequence {
  std::shared_ptr<RequestStream> stream;
  Request req;
  std::vector<int64_t> tokens;  // prompt, then generated tokens
  int64_t num_prompt = 0;
  int64_t computed = 0;  // tokens whose KV is written
  int64_t cached = 0;    // prompt tokens served by the prefix cache at first admission
  bool admitted_once = false, done = false;
  std::optional<kv::SequenceHandle> kv;
  Sampler sampler;
  StopMatcher stop;
  std::optional<tokenizer::StreamDecoder> decoder;
  clock_type::time_point arrival, first_token, last_token;
  explicit Sequence(Request r) : req(std::move(r)), sampler(req.sampling), stop(req.stop) {}
  int64_t num_output() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
};

Engine::Engine(Backend& backend, const tokenizer::Tokenizer* tokenizer, EngineOptions options)
    : backend_(backend), tok_(tokenizer), opt_(options) {
  if (opt_.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");
  if (opt_.max_num_batched_tokens < 1) throw std::invalid_argument("max_num_batched_tokens must be >= 1");
  metrics_.block_size = backend_.kv_cache().block_size();
  metrics_.pool = backend_.kv_cache().pool().stats();
}

Engine::~Engine() { shutdown(true); }

int64_t Engine::pool_tokens() const { return backend_.kv_cache().num_slots(); }

void Engine::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

std::shared_ptr<RequestStream> Engine::submit(Request req) {
  const int64_t n = static_cast<int64_t>(req.prompt_ids.size());
  if (n == 0) throw RequestError(400, "the prompt is empty");
  const int64_t vocab = backend_.vocab_size();
  for (int64_t id : req.prompt_ids)
    if (id < 0 || (vocab > 0 && id >= vocab))
      throw RequestError(400, fmt::format("prompt token id {} is outside the vocabulary (0..{})", id, vocab - 1));
  if (req.max_tokens < 1) throw RequestError(400, "max_tokens must be >= 1");
  const int64_t ctx = backend_.max_context();
  if (n + req.max_tokens > ctx)
    throw RequestError(400, fmt::format("the prompt ({} tokens) plus max_tokens ({}) is past the model's context of {} tokens",
                                        n, req.max_tokens, ctx));
  if (n + req.max_tokens > pool_tokens())
    throw RequestError(400, fmt::format("the prompt ({} tokens) plus max_tokens ({}) is more than the KV pool holds ({} tokens)",
                                        n, req.max_tokens, pool_tokens()));
  if (!req.stop.empty() && !tok_) throw RequestError(400, "stop strings need the model's tokenizer.json");
  std::unique_ptr<Sequence> s;
  try {
    s = std::make_unique<Sequence>(std::move(req));
  } catch (const std::invalid_argument& e) {
    throw RequestError(400, e.what());
  }
  s->tokens = s->req.prompt_ids;
  s->num_prompt = n;
  s->sampler.set_prompt(s->tokens);
  if (tok_) s->decoder.emplace(*tok_, true);
  s->arrival = clock_type::now();
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mu_);
    if (!accepting_) throw RequestError(503, "the server is shutting down");
    if (static_cast<int64_t>(incoming_.size() + metrics_.waiting) >= opt_.max_waiting)
      throw RequestError(503, fmt::format("the queue is full ({} requests waiting)", opt_.max_waiting));
    stream = std::make_shared<RequestStream>(next_id_++);
    s->stream = stream;
    incoming_.push_back(std::move(s));
  }
  cv_.notify_all();
  return stream;
}

void Engine::drain_incoming() {
  std::lock_guard lock(mu_);
  while (!incoming_.empty()) {
    waiting_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

void Engine::finish(Sequence& s, const std::string& reason, const std::string& error) {
  if (s.done) return;
  s.done = true;
  Event e;
  if (reason != "abort" && reason != "error") {
    if (s.decoder) e.text = s.stop.feed(s.decoder->flush());
    e.text += s.stop.flush();
  }
  e.finished = true;
  e.finish_reason = reason;
  e.error = error;
  e.prompt_tokens = s.num_prompt;
  e.completion_tokens = s.num_output();
  e.cached_tokens = s.cached;
  s.kv.reset();  // every block back to the pool
  const auto now = clock_type::now();
  {
    std::lock_guard lock(mu_);
    if (reason == "abort" || reason == "error") {
      ++metrics_.requests_aborted;
    } else {
      ++metrics_.requests_finished;
      metrics_.e2e.observe(std::chrono::duration<double>(now - s.arrival).count());
      if (s.num_output() > 1)
        metrics_.tpot.observe(std::chrono::duration<double>(s.last_token - s.first_token).count() / (s.num_output() - 1));
    }
  }
  s.stream->push(std::move(e));
}

void Engine::reap_cancelled() {
  for (auto& s : running_)
    if (s->stream->cancelled()) finish(*s, "abort");
  for (auto& s : waiting_)
    if (s->stream->cancelled()) finish(*s, "abort");
  remove_finished();
}

void Engine::remove_finished() {
  std::erase_if(running_, [](const auto& s) { return s->done; });
  std::erase_if(waiting_, [](const auto& s) { return s->done; });
}

void Engine::preempt(std::unique_ptr<Sequence>& s) {
  // Recompute later: the KV goes, the tokens (and the sampler's state) stay.
  s->kv.reset();
  s->computed = 0;
  waiting_.push_front(std::move(s));
  std::lock_guard lock(mu_);
  ++metrics_.preemptions;
}

bool Engine::schedule(std::vector<std::pair<Sequence*, int64_t>>& out) {
  int64_t budget = opt_.max_num_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    if (n <= 0) continue;
    bool fits = s.kv->reserve(s.computed + n);
    while (!fits && running_.size() - 1 > i) {  // preempt the newest other sequence
      preempt(running_.back());
      running_.pop_back();
      preempted = true;
      fits = s.kv->reserve(s.computed + n);
    }
    if (!fits) {  // it is the newest itself
      preempt(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      preempted = true;
      break;
    }
    out.emplace_back(&s, n);
    budget -= n;
  }
  if (!preempted) admit_waiting(budget, out);
  return !out.empty();
}

bool Engine::admit_waiting(int64_t& budget, std::vector<std::pair<Sequence*, int64_t>>& out) {
  bool any = false;
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < opt_.max_num_seqs) {
    Sequence& s = *waiting_.front();
    if (!s.kv) {
      s.kv.emplace(backend_.kv_cache());
      const int64_t total = static_cast<int64_t>(s.tokens.size());
      s.computed = opt_.prefix_caching ? s.kv->match_prefix(s.tokens, total - 1) : 0;
      if (!s.admitted_once) s.cached = s.computed;
    }
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    if (!s.kv->reserve(s.computed + n)) {
      s.kv.reset();  // FCFS: nothing behind it goes first; its prefix blocks stay cached
      s.computed = 0;
      break;
    }
    if (!s.admitted_once) {
      s.admitted_once = true;
      std::lock_guard lock(mu_);
      metrics_.prompt_tokens += s.num_prompt;
      metrics_.cached_prompt_tokens += s.cached;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    out.emplace_back(running_.back().get(), n);
    budget -= n;
    any = true;
  }
  return any;
}

void Engine::run_batch(const std::vector<std::pair<Sequence*, int64_t>>& batch) {
  ids_.clear();
  positions_.clear();
  slices_.clear();
  logit_rows_.clear();
  sampling_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& [s, n] = batch[i];
    slices_.push_back({static_cast<int64_t>(ids_.size()), n, s->computed + n, s->kv->slots()});
    for (int64_t p = s->computed; p < s->computed + n; ++p) {
      ids_.push_back(s->tokens[p]);
      positions_.push_back(p);
    }
    // Only a sequence that has read all its tokens after this step samples: its last row alone
    // goes through the LM head.
    if (s->computed + n == static_cast<int64_t>(s->tokens.size())) {
      logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);
      sampling_.push_back(i);
    }
  }
  if (logit_rows_.empty()) logit_rows_.push_back(static_cast<int64_t>(ids_.size()) - 1);  // one row, unread
  const runtime::Tensor* logits = nullptr;
  try {
    logits = &backend_.forward(ids_, positions_, slices_, logit_rows_);
  } catch (const std::exception& e) {
    for (const auto& [s, n] : batch) finish(*s, "error", e.what());
    return;
  }
  const int64_t width = logits->shape[2];
  for (const auto& [s, n] : batch) {
    s->computed += n;
    if (opt_.prefix_caching) s->kv->publish_full_blocks(s->tokens, s->computed);
  }
  for (size_t r = 0; r < sampling_.size(); ++r)
    on_token(*batch[sampling_[r]].first, logits->ptr<float>() + static_cast<int64_t>(r) * width, width);
}

void Engine::on_token(Sequence& s, const float* row, int64_t width) {
  Sampled t = s.sampler.sample({row, static_cast<size_t>(width)}, s.req.logprobs);
  s.tokens.push_back(t.token);
  const auto now = clock_type::now();
  if (s.num_output() == 1) {
    s.first_token = now;
    std::lock_guard lock(mu_);
    metrics_.ttft.observe(std::chrono::duration<double>(now - s.arrival).count());
  }
  s.last_token = now;
  {
    std::lock_guard lock(mu_);
    ++metrics_.generation_tokens;
  }
  Event e;
  if (s.req.logprobs) e.tokens.push_back({t.token, t.logprob, std::move(t.top)});
  else e.tokens.push_back({t.token, 0.f, {}});
  const auto& eos = backend_.eos_token_ids();
  const bool is_eos = !s.req.ignore_eos && std::find(eos.begin(), eos.end(), t.token) != eos.end();
  const bool is_stop_id = std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), t.token) !=
                          s.req.stop_token_ids.end();
  if (s.decoder && !is_eos && !is_stop_id) e.text = s.stop.feed(s.decoder->step(static_cast<uint32_t>(t.token)));
  s.stream->push(std::move(e));
  if (is_eos || is_stop_id || s.stop.matched()) finish(s, "stop");
  else if (s.num_output() >= s.req.max_tokens || static_cast<int64_t>(s.tokens.size()) >= backend_.max_context())
    finish(s, "length");
}

bool Engine::step() {
  drain_incoming();
  reap_cancelled();
  std::vector<std::pair<Sequence*, int64_t>> batch;
  const bool work = schedule(batch);
  if (work) run_batch(batch);
  remove_finished();
  std::lock_guard lock(mu_);
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.waiting = static_cast<int64_t>(waiting_.size());
  metrics_.pool = backend_.kv_cache().pool().stats();
  return work;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stopping_ && (abort_on_stop_ || (incoming_.empty() && metrics_.running == 0 && metrics_.waiting == 0))) break;
    }
    if (step()) continue;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !incoming_.empty() || stopping_; });
  }
}

void Engine::shutdown(bool abort) {
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    stopping_ = true;
    abort_on_stop_ = abort_on_stop_ || abort;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  drain_incoming();
  for (auto& s : running_) finish(*s, "abort");
  for (auto& s : waiting_) finish(*s, "abort");
  remove_finished();
  std::lock_guard lock(mu_);
  metrics_.running = metrics_.waiting = 0;
  metrics_.pool = backend_.kv_cache().pool().stats();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

}  // namespace fuselm::engine
