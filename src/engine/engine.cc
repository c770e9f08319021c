#include "engine/engine.h"

#include <fmt/core.h>
#include <omp.h>

#include <chrono>

#include "engine/prompt_logprobs.h"

namespace fuselm::engine {
namespace {

// Row r of a [1, rows, width] f32 tensor.
std::span<const float> row_of(const runtime::Tensor& t, size_t r) {
  const int64_t w = t.shape[2];
  return {t.ptr<float>() + static_cast<int64_t>(r) * w, static_cast<size_t>(w)};
}

}  // namespace

Engine::Engine(Backend& backend, const tokenizer::Tokenizer* tokenizer, EngineOptions options)
    : backend_(backend),
      tok_(tokenizer),
      opt_(options),
      scheduler_(backend.kv_cache(), {options.max_num_seqs, options.max_num_batched_tokens, options.prefix_caching},
                 backend.state_pool()),
      output_(tokenizer, backend.eos_token_ids(), backend.max_context()) {
  if (opt_.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");
  if (opt_.max_num_batched_tokens < 1) throw std::invalid_argument("max_num_batched_tokens must be >= 1");
  if (opt_.speculative.enabled()) spec_ = std::make_unique<Speculator>(opt_.speculative, backend_.vocab_size());
  metrics_.block_size = backend_.kv_cache().block_size();
  update_pool_metrics();
}

Engine::~Engine() { shutdown(true); }

int64_t Engine::pool_tokens() const { return backend_.kv_cache().num_slots(); }

void Engine::start() {
  // The loop runs the kernels with the starter's OpenMP thread count (-t/--threads): a new
  // std::thread would start from OMP_NUM_THREADS instead.
  const int threads = omp_get_max_threads();
  if (!thread_.joinable()) thread_ = std::thread([this, threads] {
      omp_set_num_threads(threads);
      loop();
    });
}

void Engine::check(const Request& req) const {
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
  for (const auto& [id, bias] : req.sampling.logit_bias)
    if (vocab > 0 && id >= vocab)
      throw RequestError(400, fmt::format("logit_bias token id {} is outside the vocabulary (0..{})", id, vocab - 1));
  if (req.sampling.min_tokens > req.max_tokens)
    throw RequestError(400, fmt::format("min_tokens ({}) is more than max_tokens ({})", req.sampling.min_tokens, req.max_tokens));
  if (req.embed && !backend_.exposes_hidden())
    throw RequestError(400, "embeddings need the model's final hidden states, which its graph does not expose (no LM head found)");
}

std::unique_ptr<Sequence> Engine::make_sequence(Request req) const {
  check(req);
  std::unique_ptr<Sequence> s;
  try {
    s = std::make_unique<Sequence>(std::move(req));
  } catch (const std::invalid_argument& e) {  // sampling parameters out of bounds
    throw RequestError(400, e.what());
  }
  s->tokens = s->req.prompt_ids;
  s->num_prompt = static_cast<int64_t>(s->tokens.size());
  output_.attach(*s);
  if (s->req.sampling.min_tokens > 0) s->sampler.set_end_tokens(end_tokens(s->req));
  s->arrival = clock_type::now();
  if (s->req.prompt_logprobs) {
    s->prompt_lps.resize(static_cast<size_t>(s->num_prompt));
    s->prompt_lps[0].id = s->tokens[0];  // nothing predicts the first token: logprob 0, reported as null
  }
  if (s->req.embed) s->pool.emplace(*s->req.embed, s->num_prompt, s->req.normalize);
  return s;
}

std::vector<int64_t> Engine::end_tokens(const Request& req) const {
  std::vector<int64_t> ids = req.stop_token_ids;
  if (!req.ignore_eos) ids.insert(ids.end(), backend_.eos_token_ids().begin(), backend_.eos_token_ids().end());
  return ids;
}

std::shared_ptr<RequestStream> Engine::submit(Request req, std::shared_ptr<StreamWaker> waker) {
  std::vector<Request> one;
  one.push_back(std::move(req));
  return submit_group(std::move(one), std::move(waker)).front();
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_group(std::vector<Request> reqs, std::shared_ptr<StreamWaker> waker) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (auto& r : reqs) seqs.push_back(make_sequence(std::move(r)));
  if (opt_.prefix_caching)
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i]->gate) continue;
      for (size_t j = i + 1; j < seqs.size(); ++j) {
        if (seqs[j]->gate || seqs[j]->req.prompt_ids != seqs[i]->req.prompt_ids) continue;
        if (!seqs[i]->gate) {
          seqs[i]->gate = std::make_shared<PromptGate>();
          seqs[i]->gate_owner = true;
        }
        seqs[j]->gate = seqs[i]->gate;
      }
    }
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    std::lock_guard lock(mu_);
    if (!accepting_) throw RequestError(503, "the server is shutting down");
    if (static_cast<int64_t>(incoming_.size() + metrics_.waiting + seqs.size()) > opt_.max_waiting)
      throw RequestError(503, fmt::format("the queue is full ({} requests waiting)", opt_.max_waiting));
    for (auto& s : seqs) {
      s->stream = std::make_shared<RequestStream>(next_id_++, waker);
      streams.push_back(s->stream);
      incoming_.push_back(std::move(s));
    }
  }
  cv_.notify_all();
  return streams;
}

void Engine::drain_incoming() {
  std::lock_guard lock(mu_);
  while (!incoming_.empty()) {
    scheduler_.add(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

void Engine::finish(Sequence& s, FinishReason reason, const std::string& error) {
  if (s.done) return;
  s.done = true;
  if (s.gate_owner) s.gate->open = true;  // its siblings compute the prompt themselves if it had not
  const bool ended = reason != FinishReason::abort && reason != FinishReason::error;
  Event e;
  if (ended) e.text = OutputProcessor::flush(s);
  e.finished = true;
  e.finish_reason = reason;
  e.error = error;
  e.prompt_tokens = s.num_prompt;
  e.completion_tokens = s.num_output();
  e.cached_tokens = s.cached;
  s.kv.reset();  // every block back to the pool
  s.state.reset();  // and its state slot
  const auto now = clock_type::now();
  {
    std::lock_guard lock(mu_);
    if (!ended) {
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
  scheduler_.for_each([this](Sequence& s) {
    if (s.stream->cancelled()) finish(s, FinishReason::abort);
  });
  scheduler_.remove_finished();
}

void Engine::count(const ScheduleCounts& c) {
  std::lock_guard lock(mu_);
  metrics_.preemptions += c.preemptions;
  metrics_.prompt_tokens += c.admitted_prompt_tokens;
  metrics_.cached_prompt_tokens += c.admitted_cached_tokens;
  metrics_.shared_prompt_tokens += c.admitted_shared_tokens;
}

void Engine::run_batch(const std::vector<ScheduledSeq>& batch) {
  batch_.build(batch);
  const runtime::Tensor* logits = nullptr;
  const runtime::Tensor* hidden = nullptr;
  try {
    logits = &backend_.forward(batch_.ids(), batch_.positions(), batch_.slices(), batch_.logit_rows());
    hidden = backend_.hidden_rows();
  } catch (const std::exception& e) {
    for (const auto& b : batch) finish(*b.seq, FinishReason::error, e.what());
    return;
  }
  for (const auto& [s, n] : batch) {
    s->computed += n;
    if (s->gate_owner && s->computed >= s->num_prompt) s->gate->open = true;
    if (opt_.prefix_caching) s->kv->publish_full_blocks(s->tokens, s->computed);
    scheduler_.checkpoint(*s);
  }
  const auto uses = batch_.uses();
  for (size_t r = 0; r < uses.size(); ++r) {
    Sequence& s = *batch[uses[r].seq].seq;
    if (s.done) continue;
    if (s.pool) {
      if (!hidden) {
        finish(s, FinishReason::error, "the model exposes no final hidden states to pool");
        continue;
      }
      s.pool->add(uses[r].position, row_of(*hidden, r));
      if (uses[r].sample) finish_embedding(s);
    } else if (!uses[r].sample) {
      on_prompt_row(s, uses[r].position, row_of(*logits, r));
    } else if (!s.spec.draft.empty()) {
      const size_t drafts = s.spec.draft.size();
      on_draft_rows(s, *logits, r);
      r += drafts;
    } else {
      on_row(s, row_of(*logits, r));
    }
  }
}

void Engine::on_prompt_row(Sequence& s, int64_t position, std::span<const float> row) {
  if (!s.req.prompt_logprobs || s.prompt_lps_sent || position + 1 >= s.num_prompt) return;
  s.prompt_lps[position + 1] = prompt_token_logprob(row, s.tokens[position + 1], s.req.sampling.top_logprobs);
}

void Engine::finish_embedding(Sequence& s) {
  Event e;
  e.embedding = s.pool->result();
  s.stream->push(std::move(e));
  finish(s, FinishReason::stop);
}

void Engine::on_draft_rows(Sequence& s, const runtime::Tensor& logits, size_t first) {
  const SpecCounts c = spec_->verify(s, output_, [&](size_t j) { return row_of(logits, first + j); }, [&](TokenStep t) {
    emit(s, std::move(t));
    return s.done;
  });
  if (opt_.prefix_caching && !s.done) s.kv->publish_full_blocks(s.tokens, s.computed);
  std::lock_guard lock(mu_);
  metrics_.spec_drafts += c.drafts;
  metrics_.spec_draft_tokens += c.draft_tokens;
  metrics_.spec_accepted_tokens += c.accepted_tokens;
}

void Engine::on_row(Sequence& s, std::span<const float> row) { emit(s, output_.on_row(s, row)); }

void Engine::emit(Sequence& s, TokenStep t) {
  if (s.req.prompt_logprobs && !s.prompt_lps_sent) {  // with the first token
    s.prompt_lps_sent = true;
    t.event.prompt_logprobs = std::move(s.prompt_lps);
  }
  const auto now = clock_type::now();
  {
    std::lock_guard lock(mu_);
    if (s.num_output() == 1) metrics_.ttft.observe(std::chrono::duration<double>(now - s.arrival).count());
    ++metrics_.generation_tokens;
  }
  if (s.num_output() == 1) s.first_token = now;
  s.last_token = now;
  s.stream->push(std::move(t.event));
  if (t.finish) finish(s, *t.finish, t.error);
}

bool Engine::step() {
  drain_incoming();
  reap_cancelled();
  ScheduleCounts counts;
  const auto batch = scheduler_.schedule(counts);
  count(counts);
  if (spec_ && !batch.empty())
    spec_->propose(batch, opt_.max_num_batched_tokens, scheduler_.running(), backend_.max_context());
  if (!batch.empty()) run_batch(batch);
  scheduler_.remove_finished();
  std::lock_guard lock(mu_);
  metrics_.running = scheduler_.running();
  metrics_.waiting = scheduler_.waiting();
  update_pool_metrics();
  return !batch.empty();
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
  scheduler_.for_each([this](Sequence& s) { finish(s, FinishReason::abort); });
  scheduler_.remove_finished();
  std::lock_guard lock(mu_);
  metrics_.running = metrics_.waiting = 0;
  update_pool_metrics();
}

void Engine::update_pool_metrics() {
  metrics_.pool = backend_.kv_cache().pool().stats();
  if (kv::StatePool* st = backend_.state_pool()) metrics_.state = st->stats();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

}  // namespace fuselm::engine
