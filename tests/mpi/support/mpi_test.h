#pragma once
// Shared by the multi-rank gtest programs in tests/mpi/: the world groups, created once by
// mpi_gtest_main.cpp before the tests run.

#include <memory>

#include "tide/comm/process_group.h"

namespace tide::mpi_test {

// The world (a duplicate of MPI_COMM_WORLD) using `algorithm` for all_reduce, reduce_scatter
// and all_gather. One group per algorithm, so tests of both run on every world size.
ProcessGroup& world(CommAlgorithm algorithm = CommAlgorithm::Mpi);
std::shared_ptr<ProcessGroup> world_ptr(CommAlgorithm algorithm = CommAlgorithm::Mpi);

}  // namespace tide::mpi_test
