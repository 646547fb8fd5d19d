// Sub-groups (split, new_group) and the pp x dp x tp topology on 2, 3, 4 and 8 ranks.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "mpi_test.h"
#include "tide/comm/mpi_process_group.h"
#include "tide/comm/topology.h"

using namespace tide;

namespace {
float sum_over(ProcessGroup& g, float v) {
  g.all_reduce(Tensor(&v, {1}));
  return v;
}
}  // namespace

TEST(Groups, SplitByParityOrdersByKey) {
  ProcessGroup& world = mpi_test::world();
  const int N = world.size(), r = world.rank();
  // Key N - r reverses the order inside each group.
  auto sub = world.split(r % 2, N - r);
  ASSERT_NE(sub, nullptr);
  const int members = (N + 1 - r % 2) / 2;  // evens: ceil(N/2), odds: floor(N/2)
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), members - 1 - r / 2);
  float expect = 0;
  for (int q = r % 2; q < N; q += 2) expect += static_cast<float>(q);
  EXPECT_EQ(sum_over(*sub, static_cast<float>(r)), expect);
  // Sub-group traffic is counted on the sub-group, not the parent.
  const uint64_t parent_before = world.counters().bytes_sent;
  sum_over(*sub, 1.0f);
  EXPECT_EQ(world.counters().bytes_sent, parent_before);
}

TEST(Groups, NewGroupFromRankListAndNonMembers) {
  ProcessGroup& world = mpi_test::world(CommAlgorithm::Ring);
  const int N = world.size(), r = world.rank();
  auto g = world.new_group({N - 1, 0});
  if (r == 0 || r == N - 1) {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), 2);
    EXPECT_EQ(g->rank(), r == N - 1 ? 0 : 1);
    EXPECT_EQ(sum_over(*g, static_cast<float>(r)), static_cast<float>(N - 1));
    std::vector<float> x = {static_cast<float>(r)};
    g->broadcast(Tensor(x.data(), {1}), 0);  // root 0 of the group is world rank N-1
    EXPECT_EQ(x[0], static_cast<float>(N - 1));
  } else {
    EXPECT_EQ(g, nullptr);
  }
  auto none = world.split(-1, 0);
  EXPECT_EQ(none, nullptr);
}

// The operations of a sub-group name world ranks (the watchdog prints these names next to the
// world ranks that did not arrive): the world in reverse, so every group rank is another
// process's world rank, and the pair {N-1, 0}.
TEST(Groups, OperationsNameWorldRanks) {
  ProcessGroup& world = mpi_test::world();
  const int N = world.size(), r = world.rank();
  auto what = [](const WorkPtr& w) {
    auto mpi = std::dynamic_pointer_cast<MpiWork>(w);
    EXPECT_NE(mpi, nullptr);
    return mpi ? mpi->what() : std::string();
  };
  auto rev = world.split(0, N - r);
  ASSERT_NE(rev, nullptr);
  const int g = rev->rank(), next = (g + 1) % N, prev = (g + N - 1) % N;
  ASSERT_EQ(g, N - 1 - r);
  EXPECT_EQ(std::dynamic_pointer_cast<MpiProcessGroup>(rev)->world_ranks()[g], r);
  std::vector<float> out(4, 1.0f), in(4);
  WorkPtr send = rev->send_async(Tensor(out.data(), {4}), next, 5);
  WorkPtr recv = rev->recv_async(Tensor(in.data(), {4}), prev, 5);
  // Group rank p is world rank N-1-p; said in brackets only where the two differ.
  auto name = [&](int p) {
    return N - 1 - p == p ? fmt::format("rank {}", p)
                          : fmt::format("rank {} (rank {} of a group of {})", N - 1 - p, p, N);
  };
  EXPECT_EQ(what(send), fmt::format("send of 16 B to {} (tag 5)", name(next)));
  EXPECT_EQ(what(recv), fmt::format("recv of 16 B from {} (tag 5)", name(prev)));
  send->wait();
  recv->wait();
  std::string members;
  for (int w = N - 1; w >= 0; --w) members += fmt::format("{}{}", w == N - 1 ? "" : ", ", w);
  WorkPtr sum = rev->all_reduce_async(Tensor(out.data(), {4}));
  EXPECT_EQ(what(sum), "all_reduce of 16 B in the group of ranks " + members);
  sum->wait();
  WorkPtr bcast = rev->broadcast_async(Tensor(out.data(), {4}), 0);
  EXPECT_EQ(what(bcast),
            fmt::format("broadcast of 16 B from {} in the group of ranks {}", name(0), members));
  bcast->wait();
  // The world's own operations stay as they were.
  WorkPtr all = world.all_reduce_async(Tensor(out.data(), {4}));
  EXPECT_EQ(what(all), "all_reduce of 16 B");
  all->wait();
  auto pair = world.new_group({N - 1, 0});
  if (pair) {
    WorkPtr b = pair->barrier_async();
    EXPECT_EQ(what(b), fmt::format("barrier in the group of ranks {}, 0", N - 1));
    b->wait();
  }
}

TEST(Topology, EveryFactorisationOfTheWorld) {
  auto world = mpi_test::world_ptr();
  const int N = world->size(), r = world->rank();
  for (int tp = 1; tp <= N; ++tp) {
    for (int pp = 1; pp <= N; ++pp) {
      if (N % (tp * pp) != 0) continue;
      const MeshShape shape{tp, N / (tp * pp), pp};
      Topology topo(world, shape);
      ASSERT_EQ(topo.coord(), shape.coord_of(r));
      for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP}) {
        ProcessGroup& g = topo.group(a);
        ASSERT_EQ(g.size(), shape[a]) << shape.str();
        ASSERT_EQ(g.rank(), topo.coord()[a]) << shape.str();
        // The group holds exactly the ranks the coordinate math says.
        const std::vector<int> ranks = shape.axis_ranks(a, r);
        const float expect = static_cast<float>(std::accumulate(ranks.begin(), ranks.end(), 0));
        ASSERT_EQ(sum_over(g, static_cast<float>(r)), expect)
            << shape.str() << " axis " << mesh_axis_name(a);
      }
    }
  }
}

TEST(Topology, MismatchedMeshIsRejectedOnEveryRank) {
  auto world = mpi_test::world_ptr();
  const int N = world->size();
  try {
    Topology topo(world, MeshShape{2, N, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("has {} ranks but the job has {}", 2 * N, N)), std::string::npos)
        << msg;
  }
  world->barrier();  // still usable afterwards: the check fails before any communication
}
