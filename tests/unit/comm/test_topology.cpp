#include <gtest/gtest.h>

#include <set>

#include "tide/comm/local_process_group.h"
#include "tide/comm/topology.h"

using namespace tide;

TEST(MeshShape, MegatronOrderTpFastestThenDpThenPp) {
  MeshShape m{2, 2, 2};  // tp, dp, pp
  EXPECT_EQ(m.coord_of(0), (MeshCoord{0, 0, 0}));
  EXPECT_EQ(m.coord_of(1), (MeshCoord{1, 0, 0}));
  EXPECT_EQ(m.coord_of(2), (MeshCoord{0, 1, 0}));
  EXPECT_EQ(m.coord_of(5), (MeshCoord{1, 0, 1}));
  EXPECT_EQ(m.coord_of(7), (MeshCoord{1, 1, 1}));
  // The groups listed in the header comment.
  EXPECT_EQ(m.axis_ranks(MeshAxis::TP, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.axis_ranks(MeshAxis::DP, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.axis_ranks(MeshAxis::PP, 3), (std::vector<int>{3, 7}));
}

TEST(MeshShape, CoordinatesRoundTripAndAxisGroupsPartitionTheWorld) {
  for (MeshShape m : {MeshShape{1, 1, 1}, MeshShape{3, 1, 1}, MeshShape{1, 3, 1},
                      MeshShape{2, 3, 4}, MeshShape{4, 1, 2}, MeshShape{1, 5, 3}}) {
    for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP}) {
      std::set<int> seen;
      std::set<int> group_indices;
      for (int r = 0; r < m.size(); ++r) {
        ASSERT_EQ(m.rank_of(m.coord_of(r)), r);
        const std::vector<int> g = m.axis_ranks(a, r);
        ASSERT_EQ(static_cast<int>(g.size()), m[a]);
        // A rank's position in its axis group is its coordinate on that axis.
        ASSERT_EQ(g[m.coord_of(r)[a]], r);
        // Every member of the group agrees on the group and its index.
        for (int q : g) {
          ASSERT_EQ(m.axis_ranks(a, q), g);
          ASSERT_EQ(m.axis_group_index(a, q), m.axis_group_index(a, r));
        }
        if (g[0] == r) {
          for (int q : g) ASSERT_TRUE(seen.insert(q).second) << "rank in two groups";
          group_indices.insert(m.axis_group_index(a, r));
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), m.size());
      EXPECT_EQ(static_cast<int>(group_indices.size()), m.size() / m[a]);
      EXPECT_EQ(*group_indices.rbegin(), m.size() / m[a] - 1);
    }
  }
}

TEST(MeshShape, TpIsContiguous) {
  MeshShape m{4, 2, 1};
  EXPECT_EQ(m.axis_ranks(MeshAxis::TP, 6), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m.axis_ranks(MeshAxis::DP, 6), (std::vector<int>{2, 6}));
}

TEST(MeshShape, WrongWorldSizeSaysWhatFits) {
  MeshShape m{2, 3, 2};
  m.check(12);
  try {
    m.check(8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pp=2 x dp=3 x tp=2 has 12 ranks but the job has 8"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("set dp=2"), std::string::npos) << msg;
  }
  // No dp fits when tp*pp does not divide the world: the message still names the product.
  try {
    MeshShape{3, 1, 1}.check(4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("whose product is 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MeshShape({0, 1, 1}).check(0), Error);
  EXPECT_THROW(MeshShape({1, -1, 1}).check(1), Error);
  EXPECT_THROW(MeshShape({2, 1, 1}).coord_of(2), Error);
}

TEST(Topology, SingleProcessMeshHasTrivialGroups) {
  Topology topo(std::make_shared<LocalProcessGroup>(), MeshShape{1, 1, 1});
  EXPECT_EQ(topo.coord(), (MeshCoord{0, 0, 0}));
  EXPECT_EQ(topo.tp().size(), 1);
  EXPECT_EQ(topo.dp().size(), 1);
  EXPECT_EQ(topo.pp().size(), 1);
  EXPECT_THROW(Topology(std::make_shared<LocalProcessGroup>(), MeshShape{1, 2, 1}), Error);
}
