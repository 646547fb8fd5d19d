// Data parallelism = ZeRO stage 0, on 2, 3, 4 and 8 ranks (fp32, CPU).
//
// N ranks with micro-batch b must train exactly like one rank that sees the same global batch:
//   (a) one rank with micro-batch N*b, and
//   (b) one rank with micro-batch b and N gradient-accumulation steps.
// Why the data lines up: the DataLoader hands rank r slots (k*N + r)*b .. +b-1 of the sequence
// order in step k. One rank with micro-batch N*b takes slots k*N*b .. +N*b-1 (the same set), and
// one rank with micro-batch b and accumulation N takes, in micro-batch j, slots (k*N + j)*b ..
// (the same set again, rank r's slice = micro-batch r). This holds across epochs (shuffle on)
// only while every run's epoch has the same number of sequences, i.e. when the number of
// sequences is a multiple of N*b: the shards below are written that way. With another count the
// DP run and run (b) would skip different tails at the epoch end and drift apart.
//
// Runs on every rank: the DP run. On rank 0 only: the two single-process baselines (a LocalProcess
// group, no MPI), while the other ranks wait for rank 0's results.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "checkpoint_tensors.h"
#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;

using namespace tide::dp_runs;

namespace {

// With dropout, too: masks are keyed by each element's global coordinates (sequence in the
// global batch, position, feature), so every split draws the single-rank run's masks.
class DataParallel : public testing::TestWithParam<std::tuple<CommAlgorithm, float>> {};

TEST_P(DataParallel, MatchesOneRankWithNTimesTheMicroBatchAndWithAccumulation) {
  const auto [algorithm, dropout] = GetParam();
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);

  const RunResult dp = train(dp_config(shard, dir, kMicro, 1, kSteps, dropout), world, kSteps);
  expect_same_on_every_rank(*world, dp);
  if (world->rank() == 0) {
    const RunResult big_batch =
        train(dp_config(shard, dir, N * kMicro, 1, kSteps, dropout), nullptr, kSteps);
    const RunResult accumulated =
        train(dp_config(shard, dir, kMicro, N, kSteps, dropout), nullptr, kSteps);
    expect_equivalent(dp, big_batch, "DP vs one rank with micro-batch N*b");
    expect_equivalent(dp, accumulated, "DP vs one rank with N accumulation steps");
    // The comparison means something only if training moved: the loss must have dropped.
    EXPECT_LT(dp.losses.back(), dp.losses.front() - 0.3f);
  }
  world->barrier();  // rank 0 finished reading the shard
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// With accumulation, gradients are reduced once per step (after the last micro-batch): one
// all-reduce per non-empty chunk plus one for the logged loss, whatever the accumulation count.
// The bytes each rank sends are exactly the ring all-reduce traffic of those chunks.
TEST_P(DataParallel, AccumulationReducesOncePerStepNotPerMicroBatch) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "communication does not depend on dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const int N = world->size(), rank = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  constexpr int kAccum = 3, kFewSteps = 3;

  for (int accum : {1, kAccum}) {
    Trainer trainer(dp_config(shard, dir, 1, accum, kFewSteps), world);
    const ChunkLayout& lay = trainer.model().store().layout();
    int chunks_with_tensors = 0;
    uint64_t ring_bytes = 0;
    for (int c = 0; c < lay.num_chunks(); ++c) {
      ++chunks_with_tensors;
      ring_bytes += ring_all_reduce_traffic(lay.chunk_elems(c), N, rank).sent * sizeof(float);
    }
    ASSERT_GE(chunks_with_tensors, 4) << "the test model should span several chunks";
    for (int s = 0; s < kFewSteps; ++s) {
      world->reset_counters();
      const StepStats st = trainer.train_step();
      EXPECT_EQ(st.grad_reductions, chunks_with_tensors) << "accum " << accum << ", step " << s;
      EXPECT_EQ(world->counters().calls, static_cast<uint64_t>(chunks_with_tensors) + 1)
          << "accum " << accum << ", step " << s << ": one all-reduce per chunk + the loss";
      EXPECT_EQ(st.bytes_sent, ring_bytes) << "accum " << accum << ", step " << s;
    }
  }

  // DP + accumulation is still the same training as one rank with the whole global batch.
  const RunResult dp = train(dp_config(shard, dir, 1, kAccum, kFewSteps), world, kFewSteps);
  expect_same_on_every_rank(*world, dp);
  if (rank == 0) {
    const RunResult one = train(dp_config(shard, dir, N, kAccum, kFewSteps), nullptr, kFewSteps);
    expect_equivalent(dp, one, "DP with accumulation vs one rank with micro-batch N*b");
  }
  world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

// A global batch size that does not match micro x accum x ranks is refused on every rank, before
// any collective, with the fix in the message.
// The validation set is a fixed list of sequences: on the same weights its loss is the same
// to the bit whatever the ranks, micro-batch and accumulation (each rank scores a share, the
// per-sequence sums are added in sequence order).
TEST_P(DataParallel, ValidationLossIsBitwiseTheSameForEverySplit) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "evaluation has no dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const float dp = Trainer(dp_config(shard, dir, kMicro, 1), world).evaluate();
  if (world->rank() == 0) {
    for (auto [micro, accum] : {std::pair{N * kMicro, 1}, {kMicro, N}, {1, 2 * N}, {3, 1}}) {
      const float one = Trainer(dp_config(shard, dir, micro, accum), nullptr).evaluate();
      EXPECT_EQ(std::memcmp(&one, &dp, sizeof(float)), 0)
          << "1 rank, micro-batch " << micro << " x " << accum << ": " << one << " vs DP " << dp;
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Resume on N ranks: 20 steps + a checkpoint (written by rank 0, read by every rank) + 20
// more equal 40 straight steps bitwise, losses and final checkpoint tensors (weights and Adam
// state). With dropout, so the restored step also restores the masks.
TEST_P(DataParallel, ResumeReproducesTheUninterruptedRunBitwise) {
  // Not a structured binding: lambdas below capture `dropout` (clang < 16 cannot capture those).
  const auto algorithm = std::get<0>(GetParam());
  const auto dropout = std::get<1>(GetParam());
  if (dropout == 0 || algorithm != CommAlgorithm::Mpi) GTEST_SKIP() << "one variant is enough";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  const int rank = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  auto cfg = [&](const std::string& out, const std::string& resume) {
    TrainConfig c = dp_config(shard, out, kMicro, 2, 2 * kSteps, dropout);
    c.resume = resume;
    return c;
  };
  auto run_until = [&](Trainer& t, int64_t until, std::vector<float>& losses) {
    while (t.step() < until) losses.push_back(t.train_step().loss);
  };
  std::vector<float> want, got;
  Trainer straight(cfg(dir + "/a", ""), world);
  run_until(straight, 2 * kSteps, want);
  std::string want_ckpt = dir + "/a/final.ckpt", mid = dir + "/b/mid.ckpt";
  if (rank == 0) straight.save("final.ckpt");
  {
    Trainer first(cfg(dir + "/b", ""), world);
    run_until(first, kSteps, got);
    if (rank == 0) first.save("mid.ckpt");
    world->barrier();  // the checkpoint is written before anyone reads it
  }
  Trainer resumed(cfg(dir + "/b", mid), world);
  run_until(resumed, 2 * kSteps, got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) EXPECT_EQ(got[s], want[s]) << "step " << s + 1;
  if (rank == 0) {
    const auto a = test::checkpoint_tensors(want_ckpt);
    const auto b = test::checkpoint_tensors(resumed.save("final.ckpt"));
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << name;
  }
  world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_P(DataParallel, RejectsTrainBatchSizeThatIgnoresTheRanks) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "the check does not depend on dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const std::string dir = shared_temp_dir(*world);
  TrainConfig cfg = dp_config(write_shared_shard(*world, dir), dir, kMicro, 1);
  cfg.train_batch_size = kMicro;  // right for one rank, wrong for N
  try {
    Trainer trainer(cfg, world);
    ADD_FAILURE() << "expected a tide::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data-parallel ranks " + std::to_string(world->size())),
              std::string::npos)
        << e.what();
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DataParallel,
                         testing::Combine(testing::Values(CommAlgorithm::Mpi, CommAlgorithm::Ring),
                                          testing::Values(0.0f, 0.1f)),
                         [](const testing::TestParamInfo<std::tuple<CommAlgorithm, float>>& info) {
                           return std::string(std::get<0>(info.param) == CommAlgorithm::Ring
                                                  ? "ring"
                                                  : "mpi") +
                                  (std::get<1>(info.param) > 0 ? "_dropout" : "");
                         });

}  // namespace
