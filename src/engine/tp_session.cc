#include "engine/tp_session.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dist/step.h"

namespace fuselm::engine {

TpSession::TpSession(int size) : comm_(dist::make_communicator(size)) {}

TpSession::~TpSession() {
  if (!leading_) return;
  try {
    dist::send_stop(*comm_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuselm: error: could not stop the other ranks: %s\n", e.what());
    comm_->abort(1);
  }
  const auto& st = comm_->stats();
  std::fprintf(stderr, "fuselm: tensor parallel: rank 0 spent %.3f s in %lld all-reduces (%.1f us each)\n",
               st.all_reduce_seconds, st.all_reduces, st.all_reduces ? 1e6 * st.all_reduce_seconds / st.all_reduces : 0.0);
  if (st.all_gathers)
    std::fprintf(stderr, "fuselm: tensor parallel: rank 0 spent %.3f s in %lld all-gathers of logits (%.1f us each)\n",
                 st.all_gather_seconds, st.all_gathers, 1e6 * st.all_gather_seconds / st.all_gathers);
}

void TpSession::configure(ModelOptions& options) {
  options.tp_size = comm_->size();
  options.tp_rank = comm_->rank();
  options.comm = comm_.get();
}

void TpSession::attach(Model& model) {
  if (comm_->size() == 1) return;
  if (comm_->rank() != 0) follow(model);
  model.set_before_forward([this](auto ids, auto pos, auto seqs, auto rows) {
    dist::send_step(*comm_, ids, pos, seqs, rows);
  });
  leading_ = true;
}

// Ranks other than 0 run rank 0's steps until it stops them; a failure ends the whole job at once.
void TpSession::follow(Model& model) {
  try {
    dist::follow(*comm_, [&](const dist::Step& s) {
      if (s.logit_rows) model.forward(s.ids, s.positions, s.slices, std::span<const int64_t>(*s.logit_rows));
      else model.forward(s.ids, s.positions, s.slices);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuselm: error: rank %d: %s\n", comm_->rank(), e.what());
    comm_->abort(1);
  }
  std::exit(0);
}

}  // namespace fuselm::engine
