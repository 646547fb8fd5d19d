// The collective watchdog's message (comm/watchdog.h): the operation, the step, the ranks that
// did not arrive. The timeout itself is tested end to end under mpirun (tests/mpi/support).

#include <gtest/gtest.h>

#include "tide/comm/watchdog.h"

using namespace tide;

TEST(Watchdog, MessageNamesOperationStepAndMissingRanks) {
  const WatchdogNote self{0, 3, 5.0, "all_reduce of 3.0 MiB"};
  EXPECT_EQ(watchdog_message(self, {}, 2, 5),
            "communication timed out: rank 0 waited 5 s (comm.timeout_s = 5) in all_reduce of "
            "3.0 MiB at step 3; rank 1 did not arrive (stopped, dead, or busy elsewhere)");
  const std::string four = watchdog_message(self, {{2, 3, 5.1, "all_reduce of 3.0 MiB"}}, 4, 5);
  EXPECT_NE(four.find("ranks 1, 3 did not arrive"), std::string::npos) << four;
  EXPECT_NE(four.find("waiting: ranks 0, 2"), std::string::npos) << four;
  // A rank waiting in another operation is named with it.
  const std::string other = watchdog_message(self, {{1, 3, 5, "barrier"}}, 2, 5);
  EXPECT_NE(other.find("every rank is waiting, in different operations"), std::string::npos);
  EXPECT_NE(other.find("(rank 1 in barrier at step 3)"), std::string::npos) << other;
}

TEST(Watchdog, HumanBytes) {
  EXPECT_EQ(human_bytes(8), "8 B");
  EXPECT_EQ(human_bytes(3 * 1048576 + 1000), "3.0 MiB");
  EXPECT_EQ(human_bytes(2048), "2.0 KiB");
}

// A sub-group's operations name ranks by world rank, as the roll call does (issue #24: under
// pp x tp a recv named group rank 1 while world rank 2 had stopped).
TEST(Watchdog, SubGroupOperationsNameWorldRanks) {
  const std::vector<int> world = {0, 1, 2, 3}, pair = {0, 2}, reversed = {3, 2, 1, 0};
  EXPECT_EQ(peer_name(world, 1), "rank 1");
  EXPECT_EQ(peer_name(pair, 1), "rank 2 (rank 1 of a group of 2)");
  EXPECT_EQ(peer_name(pair, 0), "rank 0");  // the group rank is the world rank
  EXPECT_EQ(peer_name(reversed, 0), "rank 3 (rank 0 of a group of 4)");
  EXPECT_EQ(group_suffix(world, 4), "");
  EXPECT_EQ(group_suffix(pair, 4), " in the group of ranks 0, 2");
  EXPECT_EQ(group_suffix({0, 1}, 4), " in the group of ranks 0, 1");  // the first ranks only
  EXPECT_EQ(group_suffix(reversed, 4), " in the group of ranks 3, 2, 1, 0");
  std::vector<int> evens;
  for (int r = 0; r < 32; r += 2) evens.push_back(r);
  EXPECT_EQ(group_suffix(evens, 32),
            " in a group of 16 ranks (0, 2, 4, 6, 8, 10, 12, 14 and 8 more)");
  // The line the watchdog prints for a recv in the pair whose peer, world rank 2, stopped.
  const WatchdogNote self{0, 7, 5.0, "recv of 4.0 KiB from " + peer_name(pair, 1) + " (tag 3)"};
  EXPECT_EQ(watchdog_message(self, {{1, 7, 5.0, "barrier"}, {3, 7, 5.0, "barrier"}}, 4, 5),
            "communication timed out: rank 0 waited 5 s (comm.timeout_s = 5) in recv of 4.0 KiB "
            "from rank 2 (rank 1 of a group of 2) (tag 3) at step 7; rank 2 did not arrive "
            "(stopped, dead, or busy elsewhere); waiting: ranks 0, 1, 3 (rank 1 in barrier at "
            "step 7) (rank 3 in barrier at step 7)");
}
