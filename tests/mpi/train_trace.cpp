// `trace.steps` on N ranks: rank 0 gathers every rank's events into one trace, one process per
// rank; the communication (stage 0's all-reduces; ZeRO-2/3's reduce-scatters and all-gathers in
// flight, and stage 3's parameter evictions) shows up next to the block parts; and tracing
// changes no bit of training.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "dp_runs.h"
#include "mpi_test.h"

using namespace tide;
using namespace tide::dp_runs;
using json = nlohmann::json;

namespace {

TrainConfig zero_config(const std::string& shard, const std::string& dir, int stage, int traced) {
  TrainConfig c = dp_config(shard, dir, kMicro, /*accum=*/2, /*steps=*/4, /*dropout=*/0.1f);
  c.zero.stage = stage;
  c.zero.param_persistence_threshold = 0;  // stage 3: every chunk is gathered and evicted
  c.trace_steps = traced;
  return c;
}

bool same_bits(const RunResult& a, const RunResult& b) {
  auto bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
  };
  if (!bits(a.losses, b.losses) || !bits(a.grad_norms, b.grad_norms)) return false;
  for (size_t i = 0; i < a.params.size(); ++i)
    if (!bits(a.params[i], b.params[i])) return false;
  return a.params.size() == b.params.size();
}

}  // namespace

class ZeroTrace : public testing::TestWithParam<int> {};

TEST_P(ZeroTrace, EveryRankTracesItsCommunicationAndTrainingIsUnchanged) {
  const int stage = GetParam();
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const RunResult plain = train(zero_config(shard, dir + "/plain", stage, 0), world, 4);
  const RunResult traced = train(zero_config(shard, dir + "/traced", stage, 2), world, 4);
  EXPECT_TRUE(same_bits(plain, traced)) << "tracing changed the training";
  if (world->rank() != 0) return;

  const json j = json::parse(std::ifstream(dir + "/traced/trace.json"));
  std::map<int, std::map<std::string, int>> names;  // pid -> event name -> count
  std::map<int, std::set<int>> lanes_used;
  std::set<int> named_processes;
  for (const json& e : j.at("traceEvents")) {
    const int pid = e["pid"];
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") named_processes.insert(pid);
      continue;
    }
    ++names[pid][e["name"]];
    lanes_used[pid].insert(e["tid"].get<int>());
  }
  ASSERT_EQ(static_cast<int>(names.size()), N) << "one process per rank";
  for (int r = 0; r < N; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    EXPECT_TRUE(named_processes.count(r));
    auto& n = names[r];
    EXPECT_EQ(n["step"], 2);
    if (stage == 0) {  // the DP hook: one all-reduce per chunk per step
      EXPECT_GT(n["all-reduce grads"], 0);
      EXPECT_EQ(n["all-reduce grads"] % 2, 0);
      EXPECT_EQ(n["reduce-scatter grads"], 0);
    } else {  // two steps x two micro-batches x every chunk: one reduce-scatter each
      EXPECT_GT(n["reduce-scatter grads"], 0);
      EXPECT_EQ(n["reduce-scatter grads"] % 4, 0);
      EXPECT_GT(n["all-gather params"], 0);
    }
    EXPECT_GT(n["forward"], 0);
    EXPECT_EQ(n["optimizer"], 2);
    if (stage == 3) EXPECT_GT(n["evict params"], 0);
    EXPECT_GT(lanes_used[r].size(), 1u) << "asynchronous work is on lanes of its own";
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroTrace, testing::Values(0, 2, 3));
