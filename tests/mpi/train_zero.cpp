// ZeRO-DP stages 1-3 on 2, 3, 4 and 8 ranks (fp32, CPU): the same training as one rank on the
// same global batch, bitwise the same across stages 1-3, and memory and traffic measured by the
// runtime against the ZeRO paper's formulas (docs/zero.md).

#include <gtest/gtest.h>

#include <filesystem>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/ring_traffic.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

TrainConfig zero_config(const std::string& shard, const std::string& dir, int stage, int micro,
                        int accum, int64_t steps = kSteps, float dropout = 0.0f) {
  TrainConfig c = dp_config(shard, dir, micro, accum, steps, dropout);
  c.zero.stage = stage;
  // Tiny chunks: nothing stays gathered just for being small, and small buckets so that the
  // in-flight limits are exercised (each still holds the largest chunk).
  c.zero.param_persistence_threshold = 0;
  c.zero.reduce_bucket_size = 3 * 4096;
  c.zero.allgather_bucket_size = 3 * 4096;
  c.zero.prefetch_bucket_size = 8192;
  return c;
}

bool bitwise_equal(const RunResult& a, const RunResult& b) {
  if (a.losses != b.losses || a.grad_norms != b.grad_norms) return false;
  for (size_t i = 0; i < a.params.size(); ++i)
    if (std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4) != 0)
      return false;
  return true;
}

class Zero : public testing::TestWithParam<std::tuple<int, float>> {};

// Stages 1, 2 and 3 at N ranks train like one rank with micro-batch N*b (1e-5 losses, 1e-4
// parameters), and like each other to the bit: they share one gradient path (zero.h).
TEST_P(Zero, StagesMatchOneRankAndEachOtherBitwise) {
  const auto [accum, dropout] = GetParam();
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  std::vector<RunResult> runs;
  for (int stage : {1, 2, 3}) {
    runs.push_back(
        train(zero_config(shard, dir, stage, kMicro, accum, kSteps, dropout), world, kSteps));
    expect_same_on_every_rank(*world, runs.back());
  }
  // Where bytes live and when they move never changes the arithmetic: blocking reductions,
  // no prefetch, a prefetch window larger than the model (everything stays gathered), and
  // buckets smaller than every chunk (each chunk reduced and gathered alone, at once).
  for (int variant = 0; variant < 4; ++variant) {
    TrainConfig c = zero_config(shard, dir, variant == 0 ? 2 : 3, kMicro, accum, kSteps, dropout);
    if (variant == 0) c.zero.overlap_comm = false;
    c.zero.prefetch_bucket_size = variant == 1 ? 0 : int64_t{1} << 30;
    if (variant == 3) c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = 16;
    runs.push_back(train(c, world, kSteps));
  }
  const RunResult stage0 =
      train(zero_config(shard, dir, 0, kMicro, accum, kSteps, dropout), world, kSteps);
  if (world->rank() == 0) {
    const RunResult one =
        train(zero_config(shard, dir, 0, N * kMicro, accum, kSteps, dropout), nullptr, kSteps);
    // With accumulation a few near-dead hidden units' biases (gradient ~ rounding noise, which
    // Adam turns into lr-sized steps) differ by ~1e-3 of their small tensor norm between any
    // two summation orders, stage 0 included; the whole parameter vector stays within 1e-4.
    const double per_tensor = accum == 1 ? 1e-4 : 1e-3;
    for (int k = 0; k < 3; ++k) {
      const std::string what = fmt::format("ZeRO-{} vs one rank", k + 1);
      expect_equivalent(runs[k], one, what.c_str(), per_tensor);
    }
    EXPECT_TRUE(bitwise_equal(runs[1], runs[0])) << "stage 2 differs from stage 1";
    EXPECT_TRUE(bitwise_equal(runs[2], runs[0])) << "stage 3 differs from stage 1";
    for (size_t k = 3; k < runs.size(); ++k)
      EXPECT_TRUE(bitwise_equal(runs[k], runs[0])) << "variant " << k - 3 << " differs";
    EXPECT_LT(runs[0].losses.back(), runs[0].losses.front() - 0.3f);
    // Stage 0 is not bitwise the same (the gradient norm is summed over slices in another
    // order, and with accumulation the gradients too); recorded, not required.
    fmt::print("ZeRO N={} accum={} dropout={}: stage 1 bitwise equal to stage 0: {}\n", N, accum,
               dropout, bitwise_equal(runs[0], stage0));
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Model-state bytes per rank, from the chunk store's allocation counters, against ZeRO's
// formula for fp32 training (Psi parameters, N ranks): 4 (param) + 4 (grad) + 8 (Adam m, v)
// bytes per parameter at stage 0, and at stage k the partitioned states divided by N.
TEST(ZeroMemory, ModelStatesMatchTheZeroFormula) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const double N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (int stage : {0, 1, 2, 3}) {
    TrainConfig c = zero_config(shard, dir, stage, kMicro, 1, 1);
    c.chunk_size_mb = 0.25;  // one chunk: its alignment padding is at most 16 N elements
    c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = c.zero.prefetch_bucket_size = 1
                                                                                             << 20;
    Trainer t(c, world);
    const double psi = static_cast<double>(t.model().store().layout().num_params());
    const double p = 4 * psi, g = 4 * psi, os = 8 * psi;
    const double formula = stage == 0   ? p + g + os
                           : stage == 1 ? p + g + os / N
                           : stage == 2 ? p + (g + os) / N
                                        : (p + g + os) / N;
    const double measured = static_cast<double>(t.model().store().total_bytes());
    EXPECT_NEAR(measured / formula, 1.0, 0.02)
        << "stage " << stage << ": " << measured << " bytes vs the formula's " << formula;
    if (world->rank() == 0)
      fmt::print("ZeRO-{} N={}: model states {} bytes per rank, formula {:.0f} (ratio {:.4f})\n",
                 stage, N, measured, formula, measured / formula);
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Bytes each rank sends per step, counted from the messages the ring algorithm actually sends,
// against the paper: 2 Psi (N-1)/N for stages 0-2 (all-reduce, or reduce-scatter + all-gather)
// and 3 Psi (N-1)/N for stage 3 (two gathers, one reduce-scatter), in bytes of f32 parameters.
// Stage 3 gathers each chunk twice (before its F and before its B), the tied embedding's too
// (the embedding's F, and the head's F and B, which run back to back so that it stays gathered;
// the embedding's B reads no parameter), with one exception within the 1%: the head's ln_f,
// in a small chunk of its own, is gathered once.
TEST(ZeroTraffic, BytesSentPerStepMatchTheZeroFormula) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Ring);
  const double N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (int stage : {0, 1, 2, 3}) {
    Trainer t(zero_config(shard, dir, stage, kMicro, 1, 3), world);
    const ChunkLayout& lay = t.model().store().layout();
    t.train_step();
    const StepStats st = t.train_step();
    const double psi = 4.0 * static_cast<double>(lay.total_elems());  // padding included
    const double formula = (stage < 3 ? 2 : 3) * psi * (N - 1) / N;
    EXPECT_NEAR(st.bytes_sent / formula, 1.0, 0.01)
        << "stage " << stage << ": sent " << st.bytes_sent << " bytes, formula " << formula;
    if (world->rank() == 0)
      fmt::print(
          "ZeRO-{} N={}: sent {} bytes per step, formula {:.0f} (ratio {:.4f}); {} "
          "reduce-scatters/all-reduces, {} all-gathers\n",
          stage, N, st.bytes_sent, formula, st.bytes_sent / formula, st.grad_reductions,
          st.param_gathers);
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// ZeRO-R: buffers are allocated in the first step and reused; later steps allocate nothing
// from the compute allocator. Stage 3's gathered parameters stay within one op's chunks (its
// parameter group's, model/param_groups.h) plus the prefetch window.
TEST(ZeroBuffers, StepsAfterTheFirstAllocateNothingAndStage3StaysInItsWindow) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (int stage : {1, 2, 3}) {
    for (int accum : {1, 2}) {
      const TrainConfig c = zero_config(shard, dir, stage, kMicro, accum, 5);
      Trainer t(c, world);
      const Allocator& alloc = *t.model().store().options().compute;
      t.train_step();
      const uint64_t after_first = alloc.allocations();
      int64_t peak = 0;
      for (int s = 0; s < 4; ++s) peak = std::max(peak, t.train_step().peak_gathered_param_elems);
      EXPECT_EQ(alloc.allocations(), after_first) << "stage " << stage << ", accum " << accum;
      if (stage < 3) continue;
      const ChunkLayout& lay = t.model().store().layout();
      int64_t group = 0;  // the most elements one op's chunks hold
      for (const BlockGroups& b : t.model().all_block_groups())
        for (const std::vector<int>& ids : b.groups)
          group = std::max(group, lay.chunk_elems_of(ids));
      EXPECT_GT(peak, 0);
      EXPECT_LE(peak, group + c.zero.prefetch_bucket_size) << "accum " << accum;
      EXPECT_LT(peak, lay.total_elems()) << "stage 3 gathered the whole model at once";
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Sharded checkpoints resume at the same and at another DP degree, for every stage: W ranks
// train K steps and save; R ranks resume and train K more, against W ranks training 2K steps
// straight. Micro-batches W*R/W and W*R/R keep the global batch (and the data order) equal.
// Same degree: bitwise. Another degree: losses to 1e-5 (sums in another order).
TEST(ZeroCheckpoint, ResumesAtTheSameAndAtAnotherDegreeForEveryStage) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int N = world->size(), rank = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  constexpr int K = 5;
  std::vector<std::pair<int, int>> degrees = {{N, N}, {N, 1}};  // (written at, resumed at)
  if (N >= 3) degrees.push_back({N - 1, N});
  if (N >= 4) degrees.push_back({N, N / 2});
  // The first `n` ranks of the world, or nullptr on the others (collective over the world).
  auto first = [&](int n) -> std::shared_ptr<ProcessGroup> {
    if (n == 1) return rank == 0 ? std::make_shared<LocalProcessGroup>() : nullptr;
    return world->split(rank < n ? 0 : -1, rank);
  };
  for (int stage : {1, 2, 3}) {
    for (const auto& degree : degrees) {
      // Not a structured binding: the lambda below captures W and R (clang < 16 cannot).
      const int W = degree.first, R = degree.second;
      const std::string out = fmt::format("{}/s{}_{}to{}", dir, stage, W, R);
      auto cfg = [&](int ranks, const std::string& resume) {
        TrainConfig c = zero_config(shard, out, stage, W * R / ranks, 2, 2 * K, 0.1f);
        c.resume = resume;
        return c;
      };
      std::vector<float> want, got;
      const std::shared_ptr<ProcessGroup> w = first(W), r = first(R);
      std::string mid;
      if (w) {
        Trainer straight(cfg(W, ""), w);
        while (straight.step() < 2 * K) want.push_back(straight.train_step().loss);
        Trainer t(cfg(W, ""), w);
        while (t.step() < K) got.push_back(t.train_step().loss);
        mid = t.save("mid.ckpt");
      }
      world->barrier();  // the checkpoint is committed before anyone reads it
      if (r) {
        Trainer resumed(cfg(R, out + "/mid.ckpt"), r);
        EXPECT_EQ(resumed.step(), K);
        while (resumed.step() < 2 * K) got.push_back(resumed.train_step().loss);
      }
      if (rank == 0) {  // rank 0 is in both groups
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          if (W == R)
            EXPECT_EQ(got[i], want[i]) << "stage " << stage << ", step " << i + 1;
          else
            EXPECT_NEAR(got[i], want[i], 1e-5 * want[i])
                << "stage " << stage << ", " << W << " -> " << R << " ranks, step " << i + 1;
        }
      }
      world->barrier();
    }
  }
  if (rank == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(AccumDropout, Zero,
                         testing::Combine(testing::Values(1, 2), testing::Values(0.0f, 0.1f)),
                         [](const testing::TestParamInfo<std::tuple<int, float>>& info) {
                           return fmt::format("accum{}_dropout{}", std::get<0>(info.param),
                                              std::get<1>(info.param) > 0 ? "01" : "0");
                         });

}  // namespace
