// engine::TpSession without MPI: one rank fills the model options with its communicator, and the
// communicator's collectives are identities; sizes below 1 are refused in one line.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/tp_session.h"

namespace fuselm::engine {
namespace engine_tp_session_test {

TEST(TpSession, OneRankConfiguresTheModelOptions) {
  TpSession tp(1);
  EXPECT_EQ(tp.rank(), 0);
  EXPECT_EQ(tp.size(), 1);
  ModelOptions mo;
  mo.tp_size = 7;  // overwritten
  tp.configure(mo);
  EXPECT_EQ(mo.tp_size, 1);
  EXPECT_EQ(mo.tp_rank, 0);
  EXPECT_EQ(mo.comm, &tp.comm());
  float x[3] = {1.0f, -2.0f, 3.5f};
  tp.comm().all_reduce_sum(x, 3);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(tp.comm().all_min(5), 5);
}

TEST(TpSession, RefusesASizeBelowOne) {
  try {
    TpSession tp(0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "--tensor-parallel-size 0 is not a positive number");
  }
}

}  // namespace engine_tp_session_test
}  // namespace fuselm::engine
