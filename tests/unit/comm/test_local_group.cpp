#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "error_of.h"
#include "tide/comm/distributed.h"
#include "tide/comm/local_process_group.h"

using namespace tide;
using tide::test::error_of;

namespace {
Tensor f32(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())});
}

}  // namespace

TEST(Distributed, WithoutMpirunTheWorldIsOneLocalRank) {
  ASSERT_FALSE(launched_by_mpirun()) << "run the unit tests without mpirun";
  auto world = init_distributed();
  EXPECT_EQ(world->backend(), "local");
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
}

TEST(LocalProcessGroup, CollectivesAreIdentityAndCountNoBytes) {
  LocalProcessGroup g;
  std::vector<float> a = {1, 2, 3}, b(3, 0);
  g.all_reduce(f32(a), ReduceOp::Avg);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  g.reduce_scatter(f32(a), f32(b));
  EXPECT_EQ(b, a);
  std::vector<float> c(3, 0);
  auto w = g.all_gather_async(f32(a), f32(c));
  EXPECT_TRUE(w->is_completed());
  w->wait();
  EXPECT_EQ(c, a);
  g.broadcast(f32(a), 0);
  g.barrier();
  EXPECT_EQ(g.counters().bytes_sent, 0u);
  EXPECT_EQ(g.counters().bytes_received, 0u);
  EXPECT_EQ(g.counters().calls, 4u);
  g.reset_counters();
  EXPECT_EQ(g.counters().calls, 0u);
}

TEST(LocalProcessGroup, BadArgumentsGetClearErrors) {
  LocalProcessGroup g;
  std::vector<float> a(4), b(3);
  EXPECT_NE(error_of([&] { g.reduce_scatter(f32(a), f32(b)); }).find("pad the input"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.all_gather(f32(a), f32(b)); }).find("output must be ranks*input"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.broadcast(f32(a), 1); }).find("root 1 is outside"), std::string::npos);
  EXPECT_NE(error_of([&] { g.send(f32(a), 0); }).find("cannot send to or receive from itself"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.recv(f32(a), 3); }).find("outside this group"), std::string::npos);
  std::vector<uint16_t> h(4);
  Tensor half(h.data(), {4}, DType::BF16);
  EXPECT_NE(error_of([&] { g.all_gather(half, f32(a)); }).find("use the same dtype"),
            std::string::npos);
}

TEST(LocalProcessGroup, SplitAndNewGroup) {
  LocalProcessGroup g;
  EXPECT_EQ(g.split(-1, 0), nullptr);
  EXPECT_EQ(g.split(3, 0)->size(), 1);
  EXPECT_EQ(g.new_group({0})->size(), 1);
  EXPECT_NE(error_of([&] { g.new_group({0, 0}); }).find("listed twice"), std::string::npos);
  EXPECT_NE(error_of([&] { g.new_group({1}); }).find("outside this group"), std::string::npos);
  EXPECT_NE(error_of([&] { g.new_group({}); }).find("empty"), std::string::npos);
}

TEST(RunRanks, ReturnsOneAndPrintsTheRankOnError) {
  testing::internal::CaptureStderr();
  const int rc = run_ranks([] { TIDE_FAIL("bad thing; do the other thing"); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(err, "rank 0: bad thing; do the other thing\n");
  EXPECT_EQ(run_ranks([] {}), 0);
}

TEST(CommAlgorithm, Parses) {
  EXPECT_EQ(parse_comm_algorithm("ring"), CommAlgorithm::Ring);
  EXPECT_EQ(parse_comm_algorithm("mpi"), CommAlgorithm::Mpi);
  EXPECT_NE(error_of([] { parse_comm_algorithm("tree"); }).find("use mpi or ring"),
            std::string::npos);
}

// Host-side work (local, MPI) has nothing a CUDA stream could wait on: wait_on(stream) is
// wait(), so the result is in the host buffer when it returns. The stream is not touched.
TEST(Work, WaitOnAStreamWaitsForHostWork) {
  struct CountingWork final : Work {
    int waits = 0;
    void wait() override { ++waits; }
    bool is_completed() override { return waits > 0; }
  };
  CountingWork w;
  w.wait_on(nullptr);
  EXPECT_EQ(w.waits, 1);
  int not_a_stream = 0;
  w.wait_on(&not_a_stream);
  EXPECT_EQ(w.waits, 2);
  EXPECT_EQ(not_a_stream, 0);

  LocalProcessGroup g;
  std::vector<float> a = {1, 2, 3}, b(3, 0);
  WorkPtr work = g.all_gather_async(f32(a), f32(b));
  work->wait_on(nullptr);
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(b, a);
}
