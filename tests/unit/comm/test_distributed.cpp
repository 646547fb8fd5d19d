// agree_on_errors' verdict (comm/distributed.h): what each rank reports once the ranks have
// compared how their pre-run checks went. The collective itself runs under mpirun in
// tests/mpi/support/reliability.sh (case config_error).

#include <gtest/gtest.h>

#include "tide/comm/distributed.h"
#include "tide/comm/local_process_group.h"

using namespace tide;

namespace {
// What rank `rank` raises, as {reported line or "" when it stays silent}; "none" when nothing.
std::string verdict(const std::vector<std::string>& messages, int rank) {
  std::vector<uint64_t> hashes;
  for (const std::string& m : messages) hashes.push_back(m.empty() ? 0 : error_hash(m));
  const auto e = agreed_error(hashes, rank, messages[static_cast<size_t>(rank)]);
  if (!e) return "none";
  return e->report() ? e->what() : "";
}
}  // namespace

TEST(AgreeOnErrors, NoRankFailedRaisesNothing) {
  EXPECT_EQ(verdict({"", "", ""}, 0), "none");
  EXPECT_EQ(verdict({"", "", ""}, 2), "none");
}

TEST(AgreeOnErrors, TheSameErrorOnEveryRankIsReportedOnceWithoutRank) {
  const std::vector<std::string> m(4, "unknown config key 'trian_steps'");
  EXPECT_EQ(verdict(m, 0), "unknown config key 'trian_steps'");
  for (int r = 1; r < 4; ++r) EXPECT_EQ(verdict(m, r), "") << r;  // raised, silent
}

TEST(AgreeOnErrors, AnErrorOfSomeRanksNamesThem) {
  // Rank 1 alone (a per-rank key such as data.dir): it reports, the others stay silent but
  // fail too, so that every rank exits 1.
  const std::vector<std::string> one = {"", "data.dir 'x' does not exist", ""};
  EXPECT_EQ(verdict(one, 1), "rank 1: data.dir 'x' does not exist");
  EXPECT_EQ(verdict(one, 0), "");
  EXPECT_EQ(verdict(one, 2), "");
  // Two messages: the lowest rank of each group reports it for the group.
  const std::vector<std::string> two = {"a", "b", "a", "b"};
  EXPECT_EQ(verdict(two, 0), "ranks 0, 2: a");
  EXPECT_EQ(verdict(two, 1), "ranks 1, 3: b");
  EXPECT_EQ(verdict(two, 2), "");
  EXPECT_EQ(verdict(two, 3), "");
}

TEST(AgreeOnErrors, OneRankRunsTheChecksAsTheyAre) {
  LocalProcessGroup one;
  // The error itself, not an AgreedError: a single process prints it as any other.
  try {
    agree_on_errors(one, [] { TIDE_FAIL("bad key"); });
    FAIL() << "no exception";
  } catch (const AgreedError&) {
    FAIL() << "an AgreedError on one rank";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad key"), std::string::npos);
  }
  EXPECT_NO_THROW(agree_on_errors(one, [] {}));
}

TEST(NodeRank, RanksOfAMachineCountInWorldOrder) {
  // Hosts a b a c a: rank 0, 2 and 4 share host a.
  const std::vector<uint64_t> hosts = {7, 9, 7, 11, 7};
  const NodeRank r0 = node_rank_from(hosts, 0), r2 = node_rank_from(hosts, 2);
  const NodeRank r4 = node_rank_from(hosts, 4), r3 = node_rank_from(hosts, 3);
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r2.rank, 1);
  EXPECT_EQ(r4.rank, 2);
  EXPECT_EQ(r4.size, 3);
  EXPECT_EQ(r3.rank, 0);
  EXPECT_EQ(r3.size, 1);
  LocalProcessGroup one;
  const NodeRank alone = node_rank(one);
  EXPECT_EQ(alone.rank, 0);
  EXPECT_EQ(alone.size, 1);
}

TEST(NodeRank, EachRankOfAMachineTakesItsGpu) {
  EXPECT_EQ(device_of_rank("cuda", {2, 4}), Device::cuda(2));
  EXPECT_EQ(device_of_rank("cuda:1", {0, 1}), Device::cuda(1));  // alone: the GPU named
  EXPECT_EQ(device_of_rank("sim", {2, 4}), Device::sim(0));      // each process has its own
  EXPECT_EQ(device_of_rank("cpu", {2, 4}), Device::cpu());
  try {
    device_of_rank("cuda:0", {1, 2});
    FAIL() << "one GPU named for two ranks of a machine";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set device=cuda"), std::string::npos) << e.what();
  }
}
