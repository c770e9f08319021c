#include "server/generation.h"

#include <httplib.h>

#include <chrono>
#include <functional>

#include "server/api_error.h"
#include "server/peer_socket.h"

namespace fuselm::server {
namespace {

using ojson = nlohmann::ordered_json;
using std::chrono::milliseconds;

std::string dump_ordered(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// Takes the choice's next event without waiting; false when there is none.
bool poll(Choice& c, engine::Event& e) { return !c.finished && c.stream->next(e, milliseconds(0)); }

// The event's tokens for logprobs: on a choice's first event with echo, the prompt's tokens first.
std::vector<engine::TokenOut> event_tokens(Choice& c, engine::Event& e, bool first) {
  if (!(first && c.echo_logprobs)) return std::move(e.tokens);
  std::vector<engine::TokenOut> out = std::move(e.prompt_logprobs);
  for (auto& t : e.tokens) out.push_back(std::move(t));
  return out;
}

// The event's text, the echoed prompt before the choice's first.
std::string event_text(const Choice& c, const engine::Event& e, bool first) { return first ? c.echo_text + e.text : e.text; }

// Folds a non-streamed choice's event into what it gathered.
void gather(Choice& c, engine::Event& e) {
  const bool first = !c.started;
  c.started = true;
  c.text += event_text(c, e, first);
  for (auto& t : event_tokens(c, e, first)) c.tokens.push_back(std::move(t));
  if (e.finished) {
    c.finished = true;
    c.last = std::move(e);
  }
}

bool all_finished(const Generation& g) {
  for (const auto& c : g.choices)
    if (!c.finished) return false;
  return true;
}

}  // namespace

ojson ChoiceOutput::delta(const std::string& text, bool) {
  if (text.empty()) return ojson::object();
  return {{chat_ ? "content" : "text", text}};
}

ojson ChoiceOutput::message(const std::string& text) { return {{chat_ ? "content" : "text", text}}; }

Usage Generation::usage() const {
  Usage u;
  for (const auto& c : choices) {
    if (c.counts_prompt) {
      u.prompt_tokens += c.last.prompt_tokens;
      u.cached_tokens += c.last.cached_tokens;
    }
    u.completion_tokens += c.last.completion_tokens;
  }
  return u;
}

bool collect(Generation& g, const Deadline& deadline, const httplib::Request& hreq,
             const std::function<void(Choice&, engine::Event&)>& on_event) {
  // A client that hangs up before the answer is ready cancels the request (its blocks go back).
  // Checked every 100 ms, also while tokens keep coming.
  const int fd = find_connection_socket(hreq.remote_addr, hreq.remote_port, hreq.local_port);
  auto next_check = std::chrono::steady_clock::now();
  while (!all_finished(g)) {
    if (deadline.expired()) {
      g.cancel_all();
      throw ApiError(504, deadline.message());
    }
    const uint64_t epoch = g.waker->epoch();
    bool got = false;
    engine::Event e;
    for (auto& c : g.choices)
      while (poll(c, e)) {
        got = true;
        const bool finished = e.finished;
        on_event(c, e);
        if (finished) c.finished = true;
      }
    if (fd >= 0 && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + milliseconds(100);
      if (peer_hung_up(fd)) {
        g.cancel_all();
        return false;
      }
    }
    if (!got) g.waker->wait(epoch, milliseconds(100));
  }
  return true;
}

void respond_whole(Generation& g, const ResponseBuilder& rb, const Deadline& deadline, const httplib::Request& hreq,
                   httplib::Response& res) {
  if (!collect(g, deadline, hreq, gather)) return;
  std::vector<ChoiceResult> results;
  for (auto& c : g.choices) {
    if (c.last.finish_reason == engine::FinishReason::error) {
      g.cancel_all();
      throw ApiError(500, "generation failed: " + c.last.error);
    }
    ojson fields = c.output->message(c.text);  // before finish_reason (braced init is ordered, but say so)
    results.push_back({c.index, std::move(fields), std::move(c.tokens), c.echo_logprobs, c.output->finish_reason(c.last.finish_reason)});
  }
  res.set_content(dump_ordered(rb.full(results, g.usage())), "application/json");
}

namespace {

// The streaming side of one request; the chunked content provider calls step() until it
// returns false (cancelled) or the stream is done.
struct StreamWriter {
  std::shared_ptr<Generation> g;
  std::shared_ptr<ResponseBuilder> rb;
  bool include_usage, logprobs;
  Deadline deadline;
  bool roles_sent = false;

  static bool write(httplib::DataSink& sink, const std::string& payload) {
    const std::string s = "data: " + payload + "\n\n";
    return sink.write(s.data(), s.size());
  }

  bool end(httplib::DataSink& sink, const ojson& last) {
    const bool ok = write(sink, dump_ordered(last)) && write(sink, "[DONE]");
    if (ok) sink.done();
    return ok;
  }

  // Writes the chunks of one event of choice c; false when the client is gone or the stream ended
  // in an error (every choice is then cancelled).
  bool on_event(Choice& c, engine::Event& e, httplib::DataSink& sink) {
    const bool first = !c.started;
    c.started = true;
    const std::string text = event_text(c, e, first);
    const bool echo_lp = first && c.echo_logprobs;
    auto tokens = event_tokens(c, e, first);
    if (!e.finished) {
      ojson fields = c.output->delta(text, false);
      if (fields.empty() && !logprobs) return true;
      return write(sink, dump_ordered(rb->chunk(c.index, fields, tokens, nullptr, echo_lp)));
    }
    c.finished = true;
    c.last = std::move(e);
    if (c.last.finish_reason == engine::FinishReason::error) {
      g->cancel_all();
      end(sink, error_body(500, "generation failed: " + c.last.error));
      return false;
    }
    ojson fields = c.output->delta(text, true);  // before finish_reason: the last delta may complete a tool call
    return write(sink, dump_ordered(rb->chunk(c.index, fields, tokens, c.output->finish_reason(c.last.finish_reason), echo_lp)));
  }

  bool step(httplib::DataSink& sink) {
    if (!roles_sent) {
      roles_sent = true;
      if (rb->chat())
        for (const auto& c : g->choices)
          if (!write(sink, dump_ordered(rb->role_chunk(c.index)))) return false;
    }
    if (deadline.expired()) {  // the error event, then the end of the stream
      g->cancel_all();
      return end(sink, error_body(504, deadline.message()));
    }
    const uint64_t epoch = g->waker->epoch();
    bool got = false;
    engine::Event e;
    for (auto& c : g->choices)
      while (poll(c, e)) {
        got = true;
        if (!on_event(c, e, sink)) return false;
      }
    if (all_finished(*g)) {
      bool ok = !include_usage || write(sink, dump_ordered(rb->usage_chunk(g->usage())));
      ok = ok && write(sink, "[DONE]");
      if (ok) sink.done();
      return ok;
    }
    if (!got && !g->waker->wait(epoch, milliseconds(100)) && !sink.is_writable()) return false;
    return true;
  }
};

}  // namespace

void respond_stream(std::shared_ptr<Generation> g, std::shared_ptr<ResponseBuilder> rb, bool include_usage,
                    const Deadline& deadline, bool logprobs, httplib::Response& res) {
  auto w = std::make_shared<StreamWriter>(StreamWriter{g, std::move(rb), include_usage, logprobs, deadline});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [w](size_t, httplib::DataSink& sink) {
        if (w->step(sink)) return true;
        w->g->cancel_all();
        return false;
      },
      [g](bool success) {
        if (!success) g->cancel_all();
      });
}

}  // namespace fuselm::server
