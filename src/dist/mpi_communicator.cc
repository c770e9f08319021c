// The MPI backend of Communicator (OpenMPI from Debian; compiled only when CMake found MPI).
#ifdef FUSELM_HAVE_MPI
#include <mpi.h>
#include <fmt/core.h>

#include <climits>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "dist/communicator.h"

namespace fuselm::dist {
namespace {

// MPI counts are int: larger buffers go in chunks.
constexpr size_t kChunk = static_cast<size_t>(INT_MAX) / 8;

class Mpi final : public Communicator {
 public:
  Mpi() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, size_t n) override {
    for (size_t off = 0; off < n; off += kChunk)
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD), "all-reduce");
  }
  void all_gather(const float* send, size_t n, float* recv) override {
    if (n > kChunk) throw std::runtime_error("all-gather of more than 2^28 floats per rank");
    check(MPI_Allgather(send, static_cast<int>(n), MPI_FLOAT, recv, static_cast<int>(n), MPI_FLOAT, MPI_COMM_WORLD),
          "all-gather");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk)
      check(MPI_Bcast(p + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD),
            "broadcast");
  }
  long long all_min(long long v) override {
    long long out = v;
    check(MPI_Allreduce(&v, &out, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD), "all-reduce (min)");
    return out;
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  static void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw std::runtime_error(fmt::format("MPI {} failed (error {})", what, rc));
  }
  int rank_ = 0, size_ = 1;
};

void finalize() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

}  // namespace

std::unique_ptr<Communicator> make_mpi(int expected) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // SERIALIZED: under serve the engine thread makes the collectives, never two threads at once.
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      throw std::runtime_error("this MPI library cannot be called from the engine thread (no MPI_THREAD_SERIALIZED)");
    std::atexit(finalize);
  }
  auto m = std::make_unique<Mpi>();
  if (m->size() != expected)
    throw std::runtime_error(fmt::format("--tensor-parallel-size {} but the MPI job has {} processes; start it with "
                                         "mpirun -np {}",
                                         expected, m->size(), expected));
  return m;
}

}  // namespace fuselm::dist
#endif
