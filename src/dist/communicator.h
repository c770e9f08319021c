#pragma once
// The collectives tensor parallelism needs, behind one small interface (docs/tensor-parallel.md):
// all-reduce (sum of f32), all-gather (f32, rank order) and broadcast (bytes). MPI implements it
// (OpenMPI from Debian, when the build found it); a single process implements it as identities,
// so a build without MPI runs TP size 1. A later NCCL backend implements the same interface.
// make_communicator() picks the implementation; its owner (engine::TpSession) passes it down to
// the model and the ops that make collectives: there is no process-wide world to read.
#include <cstddef>
#include <memory>

namespace fuselm::dist {

/// Time spent in the collectives of the forward (seconds) and their counts: what TP costs per step.
struct CollectiveStats {
  double all_reduce_seconds = 0.0;
  long long all_reduces = 0;
  double all_gather_seconds = 0.0;  // the vocab-parallel LM head's logits
  long long all_gathers = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// data[0..n) := the element-wise sum over every rank's data[0..n). Collective.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  /// recv[r*n .. (r+1)*n) := rank r's send[0..n) (recv holds size()*n floats). Collective.
  virtual void all_gather(const float* send, size_t n, float* recv) = 0;
  /// Every rank's data[0..bytes) := root's. Collective.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// The smallest of every rank's value. Collective.
  virtual long long all_min(long long v) = 0;
  /// Ends every rank of the job at once (a rank that failed must not leave the others waiting
  /// in a collective). Never returns.
  [[noreturn]] virtual void abort(int code) = 0;
  /// The ops' running totals (runtime/ops/dist_ops.cc adds to them; rank 0 prints them at the end).
  CollectiveStats& stats() { return stats_; }

 private:
  CollectiveStats stats_;
};

/// One process, no peers: rank 0 of 1; every collective is the identity.
std::unique_ptr<Communicator> make_single_process();

/// True when this build has the MPI backend.
bool have_mpi();

/// The communicator for tensor_parallel_size ranks: a single process for 1; for more, MPI
/// (initialised on first use, finalised at exit), which must have been started with exactly that
/// many processes (mpirun -np N). Throws std::runtime_error, one line: a size below 1, a build
/// without MPI, or an MPI job of another size. Call before any model loads.
std::unique_ptr<Communicator> make_communicator(int tensor_parallel_size);

}  // namespace fuselm::dist
