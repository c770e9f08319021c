#pragma once
// One request inside the engine: its tokens (prompt, then generated), how many have their KV
// written, its KV blocks (and a stateful model's state slot), its sampler and its output state (detokeniser, stop strings). The
// scheduler moves it between the waiting queue and the running batch; the batch assembler reads
// its tokens; the output processor appends to them.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/speculative_state.h"
#include "engine/stop_matcher.h"
#include "grammar/grammar.h"
#include "kv/sequence_handle.h"
#include "kv/state_pool.h"
#include "tokenizer/stream_decoder.h"

namespace fuselm::engine {

using clock_type = std::chrono::steady_clock;

/// Shared by the sequences of one request that read the same prompt (n > 1 choices): the first
/// (the owner) computes the prompt; the others wait in the queue until it has (or has ended), then
/// take its full KV blocks from the prefix cache instead of computing them again.
struct PromptGate {
  bool open = false;
};

struct Sequence {
  std::shared_ptr<RequestStream> stream;
  Request req;
  std::vector<int64_t> tokens;  // prompt, then generated tokens
  int64_t num_prompt = 0;
  int64_t computed = 0;  // tokens whose KV is written
  int64_t cached = 0;    // prompt tokens served by the prefix cache at first admission
  bool admitted_once = false, done = false;
  std::optional<kv::SequenceHandle> kv;
  std::optional<kv::StateLease> state;  // a stateful model's slot, held while running (scheduler.h)
  Sampler sampler;
  StopMatcher stop;
  std::optional<tokenizer::StreamDecoder> decoder;  // none without a tokenizer: no text
  std::vector<TokenOut> prompt_lps;     // Request::prompt_logprobs, per prompt position until sent
  bool prompt_lps_sent = false;
  std::optional<PoolState> pool;        // Request::embed
  std::shared_ptr<PromptGate> gate;  // set for choices sharing a prompt (engine.h submit_group)
  bool gate_owner = false;           // this sequence computes the prompt and opens the gate
  std::optional<grammar::Matcher> matcher;  // constrained requests only (req.grammar)
  std::vector<int32_t> grammar_mask;        // the matcher's bitmask, reused step to step
  clock_type::time_point arrival, first_token, last_token;
  SpecState spec;  // speculative decoding (engine/speculative.h): this step's drafts, the draft model's KV

  /// Throws std::invalid_argument for sampling parameters out of their bounds (Sampler).
  explicit Sequence(Request r) : req(std::move(r)), sampler(req.sampling), stop(req.stop) {
    if (req.grammar) matcher.emplace(req.grammar);
  }
  int64_t num_output() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
  /// Tokens still to compute (their KV unwritten).
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - computed; }
  /// Whether every prompt row's output is read (prompt logprobs, pooling over all rows), so the
  /// prefix cache may not stand in for any of them.
  bool reads_prompt_rows() const { return req.prompt_logprobs || (req.embed && pools_all_rows(*req.embed)); }
  /// Its slot in the StateCache, -1 when it holds none (SequenceSlice::state_slot).
  int32_t state_slot() const { return state ? state->slot() : -1; }
  /// Whether this sequence waits for another one to compute its prompt first.
  bool gated() const { return gate && !gate_owner && !gate->open; }
};

/// One sequence's share of a step: `tokens` of its pending tokens, from `seq->computed` on.
struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t tokens = 0;
};

}  // namespace fuselm::engine
