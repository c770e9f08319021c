#include "dist/step.h"

#include <stdexcept>

namespace fuselm::dist {
namespace {

// The header of a step: kind (0 stop, 1 forward) and the counts of what follows.
struct Header {
  int64_t kind = 0, tokens = 0, sequences = 0, slots = 0;
  int64_t logit_rows = -1;  // -1: every row
};

// A slice as it travels: its slots are sent after all slices, in slice order.
struct WireSlice {
  int64_t first_token = 0, num_tokens = 0, context_len = 0;
  int64_t state_slot = -1;  // a stateful model's slot (every rank holds the same slots)
};

}  // namespace

void send_step(Communicator& c, std::span<const int64_t> ids, std::span<const int64_t> positions,
               std::span<const runtime::SequenceSlice> slices, std::optional<std::span<const int64_t>> logit_rows) {
  if (c.size() == 1) return;
  if (ids.size() != positions.size()) throw std::logic_error("send_step: ids and positions differ in length");
  Header h{1, static_cast<int64_t>(ids.size()), static_cast<int64_t>(slices.size()), 0,
           logit_rows ? static_cast<int64_t>(logit_rows->size()) : -1};
  std::vector<WireSlice> ws;
  for (const auto& s : slices) {
    ws.push_back({s.first_token, s.num_tokens, s.context_len, s.state_slot});
    h.slots += s.context_len;
  }
  std::vector<int32_t> slots;
  slots.reserve(static_cast<size_t>(h.slots));
  for (const auto& s : slices) slots.insert(slots.end(), s.slots, s.slots + s.context_len);
  c.broadcast(&h, sizeof h, 0);
  c.broadcast(const_cast<int64_t*>(ids.data()), ids.size() * sizeof(int64_t), 0);
  c.broadcast(const_cast<int64_t*>(positions.data()), positions.size() * sizeof(int64_t), 0);
  c.broadcast(ws.data(), ws.size() * sizeof(WireSlice), 0);
  c.broadcast(slots.data(), slots.size() * sizeof(int32_t), 0);
  if (logit_rows) c.broadcast(const_cast<int64_t*>(logit_rows->data()), logit_rows->size() * sizeof(int64_t), 0);
}

void send_stop(Communicator& c) {
  if (c.size() == 1) return;
  Header h;
  c.broadcast(&h, sizeof h, 0);
}

bool receive_step(Communicator& c, Step& out) {
  Header h;
  c.broadcast(&h, sizeof h, 0);
  if (h.kind == 0) return false;
  out.ids.resize(static_cast<size_t>(h.tokens));
  out.positions.resize(static_cast<size_t>(h.tokens));
  std::vector<WireSlice> ws(static_cast<size_t>(h.sequences));
  out.slots.resize(static_cast<size_t>(h.slots));
  c.broadcast(out.ids.data(), out.ids.size() * sizeof(int64_t), 0);
  c.broadcast(out.positions.data(), out.positions.size() * sizeof(int64_t), 0);
  c.broadcast(ws.data(), ws.size() * sizeof(WireSlice), 0);
  c.broadcast(out.slots.data(), out.slots.size() * sizeof(int32_t), 0);
  out.logit_rows.reset();
  if (h.logit_rows >= 0) {
    out.logit_rows.emplace(static_cast<size_t>(h.logit_rows));
    c.broadcast(out.logit_rows->data(), out.logit_rows->size() * sizeof(int64_t), 0);
  }
  out.slices.clear();
  int64_t at = 0;
  for (const auto& w : ws) {
    out.slices.push_back(
        {w.first_token, w.num_tokens, w.context_len, out.slots.data() + at, static_cast<int32_t>(w.state_slot)});
    at += w.context_len;
  }
  return true;
}

void follow(Communicator& c, const std::function<void(const Step&)>& forward) {
  Step s;
  while (receive_step(c, s)) forward(s);
}

}  // namespace fuselm::dist
