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
