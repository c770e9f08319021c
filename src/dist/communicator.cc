#include "dist/communicator.h"

#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace fuselm::dist {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const float* send, size_t n, float* recv) override {
    if (send != recv) std::memmove(recv, send, n * sizeof(float));
  }
  void broadcast(void*, size_t, int) override {}
  long long all_min(long long v) override { return v; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

std::unique_ptr<Communicator> make_single_process() { return std::make_unique<SingleProcess>(); }

#ifndef FUSELM_HAVE_MPI
bool have_mpi() { return false; }
std::unique_ptr<Communicator> make_mpi(int) {
  throw std::runtime_error("--tensor-parallel-size > 1 needs MPI, and this fuselm was built without it "
                           "(install libopenmpi-dev and rebuild)");
}
#else
std::unique_ptr<Communicator> make_mpi(int expected);  // mpi_communicator.cc
bool have_mpi() { return true; }
#endif

std::unique_ptr<Communicator> make_communicator(int tensor_parallel_size) {
  if (tensor_parallel_size < 1)
    throw std::runtime_error(fmt::format("--tensor-parallel-size {} is not a positive number", tensor_parallel_size));
  return tensor_parallel_size == 1 ? make_single_process() : make_mpi(tensor_parallel_size);
}

}  // namespace fuselm::dist
