#pragma once
// One process's part in a tensor-parallel job (docs/tensor-parallel.md): it owns the job's
// communicator, fills the model options from it, and ties the loaded model to the other ranks:
// rank 0 broadcasts every forward's step before running it; the other ranks run rank 0's steps
// until it stops them. Rank 0 stops them when its session ends (the destructor), so a front end
// creates one session per process, before loading, and keeps it alive while the model runs.
#include <memory>

#include "dist/communicator.h"
#include "engine/model.h"

namespace fuselm::engine {

class TpSession {
 public:
  /// The communicator for `size` ranks (dist::make_communicator): throws std::runtime_error, one
  /// line, for a size below 1, a build without MPI or an MPI job of another size.
  explicit TpSession(int size);
  /// Rank 0 under TP: tells the followers to leave their loop, and prints what the collectives cost.
  ~TpSession();
  TpSession(const TpSession&) = delete;
  TpSession& operator=(const TpSession&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  dist::Communicator& comm() { return *comm_; }

  /// Sets options' tp_size, tp_rank and communicator for this process.
  void configure(ModelOptions& options);
  /// Ties `model` (loaded with configure's options; it must outlive the session's use of it) to the
  /// job. Rank 0 (or any rank at size 1): returns after hooking the step broadcast into
  /// model.forward. Other ranks: run rank 0's steps on `model` until it stops them, then end the
  /// process (exit 0); a failure ends the whole job at once (Communicator::abort). Never returns
  /// on those ranks.
  void attach(Model& model);

 private:
  [[noreturn]] void follow(Model& model);
  std::unique_ptr<dist::Communicator> comm_;
  bool leading_ = false;  // rank 0 of a job of 2 or more, with a model attached: stops the others
};

}  // namespace fuselm::engine
