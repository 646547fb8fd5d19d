// main() for the multi-rank gtest programs: every rank runs every test; rank 0 prints the usual
// gtest report, other ranks print only their failures. A failure on any rank aborts the whole
// job at the end of that test (MPI_Abort through abort_world), because the ranks' collectives
// no longer line up after a failed assertion and the job would otherwise hang until ctest's
// timeout.

#include <gtest/gtest.h>

#include "mpi_test.h"
#include "tide/comm/distributed.h"
#include "tide/comm/mpi_process_group.h"

namespace tide::mpi_test {

namespace {
std::shared_ptr<ProcessGroup> g_world[2];

class AbortOnFailure : public testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed() && rank_ != 0)  // rank 0's default printer reports it already
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      abort_world(
          fmt::format("test {}.{} failed on this rank", info.test_suite_name(), info.name()));
  }

 private:
  int rank_;
};
}  // namespace

ProcessGroup& world(CommAlgorithm algorithm) {
  return *world_ptr(algorithm);
}
std::shared_ptr<ProcessGroup> world_ptr(CommAlgorithm algorithm) {
  return g_world[static_cast<int>(algorithm)];
}

}  // namespace tide::mpi_test

int main(int argc, char** argv) {
  using namespace tide;
  testing::InitGoogleTest(&argc, argv);
  int rc = 1;
  const int run = run_ranks([&] {
    TIDE_CHECK(launched_by_mpirun(), "this test needs several ranks; run it with mpirun -np N");
    mpi_test::g_world[0] = init_distributed({CommAlgorithm::Mpi});
    mpi_test::g_world[1] = init_distributed({CommAlgorithm::Ring});
    const int rank = mpi_test::g_world[0]->rank();
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpi_test::AbortOnFailure(rank));
    rc = RUN_ALL_TESTS();
    // Free the groups while MPI is still running (MPI_Finalize comes with the engine).
    mpi_test::g_world[0].reset();
    mpi_test::g_world[1].reset();
  });
  return run != 0 ? run : rc;
}
