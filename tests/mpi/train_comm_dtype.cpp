// communication_data_type (issue #26): the dtype the data-parallel gradient reductions send,
// on 2 and 3 ranks with the explicit ring algorithm, whose byte counters add up the messages it
// really sends (comm/ring_traffic.h).
//  * The bytes: two runs that differ only in the key send, per step, exactly the gradient
//    elements' ring traffic times the difference of the two element sizes (everything else
//    they send, parameter gathers and scalars, is the same and cancels).
//  * The values: bf16 gradients reduced in fp32 train the default (bf16) run's model bitwise on
//    two ranks (a sum of two bf16 values computed in f32 and rounded once is what the bf16
//    reduction computes); on three, to the bf16 tolerance of train_mixed_precision.cpp.

#include <gtest/gtest.h>

#include <filesystem>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int64_t kCommSteps = 4;

struct CommRun {
  RunResult result;
  uint64_t bytes_sent = 0;  // during the training steps
  std::vector<int64_t> chunk_elems;
};

CommRun train_counting(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world) {
  Trainer trainer(cfg, world);
  CommRun run;
  const uint64_t before = world->counters().bytes_sent;
  for (int64_t s = 0; s < kCommSteps; ++s) {
    const StepStats st = trainer.train_step();
    run.result.losses.push_back(st.loss);
    run.result.grad_norms.push_back(static_cast<float>(st.grad_norm));
  }
  run.bytes_sent = world->counters().bytes_sent - before;
  const ChunkLayout& lay = trainer.model().store().layout();
  for (int c = 0; c < lay.num_chunks(); ++c) run.chunk_elems.push_back(lay.chunk_elems(c));
  return run;
}

// Elements this rank sends in one step's gradient reductions: a ring all-reduce of every chunk
// (stage 0: 2n minus the two ring chunks it never sends) or a reduce-scatter of it (stages 1-3:
// the N-1 slices it passes on), once per micro-batch for the reduce-scatter.
int64_t grad_elements_sent(const CommRun& run, int stage, int world, int rank, int micro_batches) {
  int64_t sent = 0;
  for (int64_t n : run.chunk_elems) {
    if (stage == 0)
      sent += 2 * n - chunk_size(n, world, (rank + 1) % world) -
              chunk_size(n, world, (rank + 2) % world);
    else
      sent += int64_t{micro_batches} * (world - 1) * (n / world);
  }
  return sent;
}

struct Case {
  const char* what;
  std::vector<std::string> keys;  // the model and stage
  const char* comm_a;             // communication_data_type of the two runs ("" = default)
  const char* comm_b;
  int stage;
  int bytes_a, bytes_b;  // their element sizes
};

}  // namespace

TEST(CommDtype, EachRunSendsItsDtypesBytes) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Ring);
  const int N = world->size(), r = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const std::vector<Case> cases = {
      // bf16 without ZeRO keeps f32 gradients; DeepSpeed's default sends them in bf16.
      {"bf16 stage 0, f32 gradients",
       {"bf16.enabled=true", "zero_optimization.stage=0"},
       "fp32",
       "",
       0,
       4,
       2},
      {"bf16 stage 2, bf16 gradients",
       {"bf16.enabled=true", "zero_optimization.stage=2"},
       "fp32",
       "",
       2,
       4,
       2},
      {"f32 stage 1", {"zero_optimization.stage=1"}, "", "bf16", 1, 4, 2},
      {"fp16 stage 3", {"fp16.enabled=true", "zero_optimization.stage=3"}, "", "bf16", 3, 2, 2}};
  const int micro = 2, accum = 2;
  for (const Case& c : cases) {
    auto cfg = [&](const char* comm) {
      std::vector<std::string> keys = c.keys;
      keys.push_back(fmt::format("communication_data_type={}", comm));
      return dp_config(shard, dir, micro, accum, kCommSteps, 0.1f, keys);
    };
    const CommRun a = train_counting(cfg(c.comm_a), world),
                  b = train_counting(cfg(c.comm_b), world);
    const int64_t elems = grad_elements_sent(a, c.stage, N, r, accum) * kCommSteps;
    EXPECT_EQ(static_cast<int64_t>(a.bytes_sent) - static_cast<int64_t>(b.bytes_sent),
              elems * (c.bytes_a - c.bytes_b))
        << c.what << ": " << a.bytes_sent << " vs " << b.bytes_sent << " bytes, " << elems
        << " gradient elements";
    EXPECT_GT(elems, 0) << c.what;
    // Both train: the losses stay within the bf16 tolerance of each other.
    for (int64_t s = 0; s < kCommSteps; ++s)
      EXPECT_NEAR(a.result.losses[s], b.result.losses[s], 2e-4 * std::abs(b.result.losses[s]))
          << c.what << ", step " << s + 1;
  }
  world->barrier();
  if (r == 0) std::filesystem::remove_all(dir);
}

TEST(CommDtype, Bf16GradientsReducedInFp32) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Ring);
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (int stage : {1, 2}) {
    auto cfg = [&](const char* comm) {
      return dp_config(shard, dir, 2, 1, kSteps, 0.1f,
                       {"bf16.enabled=true", fmt::format("zero_optimization.stage={}", stage),
                        fmt::format("communication_data_type={}", comm)});
    };
    const RunResult f32 = train(cfg("fp32"), world, kSteps), bf16 = train(cfg(""), world, kSteps);
    if (world->size() == 2) {
      EXPECT_EQ(differs(f32, bf16), "") << "stage " << stage;
    } else {
      // Three ranks: the bf16 ring rounds after each of its two additions, fp32 once.
      for (size_t s = 0; s < f32.losses.size(); ++s)
        EXPECT_NEAR(f32.losses[s], bf16.losses[s], 2e-4 * std::abs(bf16.losses[s]))
            << "stage " << stage << ", step " << s + 1;
      EXPECT_NE(differs(f32, bf16), "") << "stage " << stage << ": no rounding difference at all";
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}
