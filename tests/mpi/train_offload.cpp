// ZeRO-Offload (zero_optimization.offload_optimizer.device=cpu; parallel/offload_policy.h) through
// `tide train`'s Trainer, on N ranks and on one (and under tensor parallelism, tp 2 x dp 1 and
// 2 on 2 and 4 ranks): the same training as without offload to the bit, the traffic the paper
// states (f32 on CPU: 4 Psi/N bytes down and 4 Psi/N up per step), and the optimizer state off the
// compute tier, measured by the allocators.

#include <gtest/gtest.h>

#include <filesystem>

#include "dp_runs.h"
#include "error_of.h"
#include "mpi_test.h"
#include "tide/config/unsupported_settings.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int64_t kOffloadSteps = 6;

TrainConfig offload_config(const std::string& shard, const std::string& dir, int stage,
                           bool offload, int accum = 1, bool bf16 = false) {
  TrainConfig c =
      dp_config(shard, dir, kMicro, accum, kOffloadSteps, 0.0f,
                bf16 ? std::vector<std::string>{"bf16.enabled=true"} : std::vector<std::string>{});
  c.zero.stage = stage;
  c.zero.param_persistence_threshold = 0;
  c.zero.reduce_bucket_size = 3 * 4096;
  c.zero.allgather_bucket_size = 3 * 4096;
  c.zero.prefetch_bucket_size = 8192;
  c.offload_optimizer = offload ? "cpu" : "none";
  c.zero.offload_optimizer.enabled = offload;
  return c;
}

// Offload changes where the optimizer runs and its state lives, never the arithmetic: losses,
// gradient norms and final parameters equal the non-offloaded run's bitwise, at stages 1-3, on
// N ranks and on one (rank 0 alone), with clipping (Adam after backward) and without it (Adam
// as each chunk arrives), with and without gradient accumulation, with and without dropout.
TEST(Offload, ReproducesTheRunWithoutOffloadBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  struct Variant {
    int stage, accum;
    float clip, dropout;
    bool bf16 = false;
  };
  const Variant variants[] = {{1, 1, 1.0f, 0.0f}, {2, 2, 1.0f, 0.1f}, {3, 1, 1.0f, 0.0f},
                              {2, 1, 0.0f, 0.0f}, {3, 2, 0.0f, 0.1f}, {2, 2, 1.0f, 0.1f, true}};
  for (const Variant& v : variants) {
    // bf16: the mean over 3 ranks is inexact; both paths round it to the gradients' bf16.
    TrainConfig base = offload_config(shard, dir, v.stage, false, v.accum, v.bf16);
    TrainConfig off = offload_config(shard, dir, v.stage, true, v.accum, v.bf16);
    for (TrainConfig* c : {&base, &off}) {
      c->grad_clip = v.clip;
      c->model.dropout = v.dropout;
    }
    const std::string what =
        fmt::format("stage {} accum {} clip {} dropout {}{} on {} ranks", v.stage, v.accum, v.clip,
                    v.dropout, v.bf16 ? " bf16" : "", world->size());
    const RunResult a = train(off, world, kOffloadSteps), b = train(base, world, kOffloadSteps);
    EXPECT_EQ(differs(a, b), "") << what;
    EXPECT_LT(a.losses.back(), a.losses.front()) << what;
  }
  if (world->rank() == 0)
    for (int stage : {1, 3}) {
      const RunResult a = train(offload_config(shard, dir, stage, true), nullptr, kOffloadSteps);
      const RunResult b = train(offload_config(shard, dir, stage, false), nullptr, kOffloadSteps);
      EXPECT_EQ(differs(a, b), "") << "stage " << stage << " on one rank";
    }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// The final values of the PARAM slice this rank owns, per chunk (under tp: of its shards).
std::vector<std::vector<float>> owned_params(Trainer& t) {
  const ChunkStore& store = t.model().store();
  std::vector<std::vector<float>> out;
  for (int c = 0; c < store.layout().num_chunks(); ++c) {
    const Tensor s = store.slice(ChunkKind::PARAM, c);
    out.emplace_back(s.f32(), s.f32() + s.numel());
  }
  return out;
}

// Under tensor parallelism (tp 2 x dp 1 on 2 ranks, tp 2 x dp 2 on 4) offload gives the run
// without it bitwise: losses, gradient norms (added per tensor, Engine::tp_grad_norm_squared,
// from the offload thread's per-tensor sums of its host copies) and the final parameters of
// every rank's shards and slices, at stages 1-3, with clipping (Adam after the norm) and without
// (Adam as each chunk arrives), with sequence parallelism on some variants, with gradient
// accumulation and with offload_param on one.
TEST(Offload, ReproducesTheTensorParallelRunWithoutOffloadBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  if (world->size() != 2 && world->size() != 4) GTEST_SKIP() << "tp 2 x dp 1 and 2: np 2 and 4";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  struct Variant {
    int stage, accum;
    float clip;
    bool sp, offload_param;
  };
  const Variant variants[] = {{1, 1, 1.0f, false, false},
                              {2, 2, 0.0f, true, false},
                              {3, 1, 1.0f, true, false},
                              {3, 2, 0.0f, false, false},
                              {3, 1, 1.0f, true, true}};
  for (const Variant& v : variants) {
    auto config = [&](bool offload) {
      TrainConfig c = offload_config(shard, dir, v.stage, offload, v.accum);
      c.grad_clip = v.clip;
      c.tensor_parallel = 2;
      c.sequence_parallel = v.sp;
      if (offload && v.offload_param) c.offload_param = "cpu";
      return c;
    };
    const std::string what =
        fmt::format("tp 2 x dp {}, stage {} accum {} clip {} sp {} offload_param {}",
                    world->size() / 2, v.stage, v.accum, v.clip, v.sp, v.offload_param);
    RunResult r[2];
    std::vector<std::vector<float>> params[2];
    for (bool offload : {true, false}) {
      Trainer t(config(offload), world);
      ASSERT_EQ(t.model().tp(), 2) << what;
      for (int64_t s = 0; s < kOffloadSteps; ++s) {
        const StepStats st = t.train_step();
        r[offload].losses.push_back(st.loss);
        r[offload].grad_norms.push_back(static_cast<float>(st.grad_norm));
        if (offload) {
          EXPECT_EQ(st.offload.moves_to_host, t.model().store().layout().num_chunks()) << what;
        }
      }
      params[offload] = owned_params(t);
    }
    EXPECT_EQ(differs(r[1], r[0]), "") << what;
    for (size_t c = 0; c < params[0].size(); ++c)
      EXPECT_EQ(std::memcmp(params[1][c].data(), params[0][c].data(), params[0][c].size() * 4), 0)
          << what << ": final values of chunk " << c << " on rank " << world->rank();
    EXPECT_LT(r[1].losses.back(), r[1].losses.front()) << what;
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Under tp x dp the whole-model checkpoint (save_checkpoint_tp: shards and ZeRO slices gathered;
// the master weights are the parameters) written with offload at ZeRO-3 resumes, with offload,
// to the uninterrupted run's losses and final parameter slices bitwise.
TEST(Offload, TensorParallelCheckpointsResumeBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  if (world->size() != 2 && world->size() != 4) GTEST_SKIP() << "tp 2 x dp 1 and 2: np 2 and 4";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  auto config = [&](const std::string& out) {
    TrainConfig c = offload_config(shard, out, 3, true);
    c.tensor_parallel = 2;
    c.sequence_parallel = true;
    return c;
  };
  std::vector<float> whole;
  std::vector<std::vector<float>> whole_params;
  {
    Trainer t(config(dir + "/whole"), world);
    for (int64_t s = 0; s < kOffloadSteps; ++s) whole.push_back(t.train_step().loss);
    whole_params = owned_params(t);
  }
  std::string ckpt;
  {
    Trainer t(config(dir + "/first"), world);
    for (int s = 0; s < 3; ++s) t.train_step();
    ckpt = t.save("step3.ckpt");
  }
  TrainConfig c = config(dir + "/resumed");
  c.resume = ckpt;
  Trainer t(c, world);
  for (int64_t s = 3; s < kOffloadSteps; ++s) {
    const float loss = t.train_step().loss;
    EXPECT_EQ(std::memcmp(&loss, &whole[s], 4), 0)
        << "step " << s + 1 << ": " << loss << " vs " << whole[s];
  }
  const std::vector<std::vector<float>> params = owned_params(t);
  for (size_t c = 0; c < params.size(); ++c)
    EXPECT_EQ(std::memcmp(params[c].data(), whole_params[c].data(), params[c].size() * 4), 0)
        << "final values of chunk " << c << " on rank " << world->rank();
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Per step and rank: the owned f32 gradient slice of every chunk down, the updated parameter
// slice up (4 Psi/N bytes each way, Psi the padded parameters, exact), one move per chunk each
// way. The host holds the master weights and Adam m, v (12 Psi/N bytes) and the gradient copies
// (4 Psi/N); the compute tier holds parameters, gradients and ZeRO's buffers only, and a run
// whose budget is exactly its measured peak trains while one byte less does not start.
TEST(Offload, TrafficAndMemoryAreWhatThePaperStates) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int64_t N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (int stage : {1, 2, 3}) {
    TrainConfig c = offload_config(shard, dir, stage, true);
    size_t peak = 0;
    {
      Trainer t(c, world);
      const ChunkStore& store = t.model().store();
      const ChunkLayout& lay = store.layout();
      const uint64_t psi = static_cast<uint64_t>(lay.total_elems());
      ASSERT_EQ(psi % N, 0u);
      for (int s = 0; s < 2; ++s) {
        const StepStats st = t.train_step();
        EXPECT_EQ(st.offload.bytes_to_host, 4 * psi / N) << "stage " << stage;
        EXPECT_EQ(st.offload.bytes_to_compute, 4 * psi / N) << "stage " << stage;
        EXPECT_EQ(st.offload.moves_to_host, lay.num_chunks());
        EXPECT_EQ(st.offload.moves_to_compute, lay.num_chunks());
        EXPECT_GT(st.offload.adam_seconds, 0.0);
      }
      ASSERT_NE(t.compute_allocator(), nullptr);
      EXPECT_EQ(t.host_tier_bytes(), 12 * psi / N) << "stage " << stage;
      EXPECT_EQ(t.engine().offload_grad_allocator()->allocated(), 4 * psi / N);
      const size_t on_compute = store.bytes(ChunkKind::PARAM) + store.bytes(ChunkKind::GRAD) +
                                t.engine().comm_buffer_bytes();
      EXPECT_EQ(t.compute_allocator()->allocated(), on_compute) << "stage " << stage;
      // The progress line's `mem` counts the host gradient buffers too (and the evaluation's
      // micro-batch of one sequence, sized for evaluation: nothing kept for backward).
      const auto eval = t.model().make_micro_batch(1, c.seq_len, nullptr, /*training=*/false);
      EXPECT_EQ(t.memory_bytes(), store.total_bytes() + t.engine().activation_bytes() +
                                      t.engine().comm_buffer_bytes() + 4 * psi / N +
                                      eval->saved.capacity() + eval->workspace.capacity());
      peak = t.compute_allocator()->peak();
    }
    c.device_memory_limit = static_cast<int64_t>(peak);
    {
      Trainer t(c, world);
      t.train_step();
      t.train_step();
      EXPECT_LE(t.compute_allocator()->peak(), peak);
    }
    if (stage == 1) {  // the model states alone exceed the budget: a clear error at the start
      c.device_memory_limit = static_cast<int64_t>(peak) / 4;
      EXPECT_NE(test::error_of([&] {
                  Trainer t(c, world);
                }).find("out of budgeted device memory: param chunk"),
                std::string::npos);
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// offload_param (stage 3, on N ranks and on one): the parameter slices live on the host and each
// block's chunks are gathered into the compute tier on use. Same bits as the run without any
// offload; the compute tier never holds a parameter slice, and a budget of a quarter of the
// model states (16 Psi bytes: f32 params, grads, Adam m, v) is enough to train.
TEST(Offload, ParamOffloadReproducesTheRunBitwiseWithinAQuarterOfTheStates) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int64_t N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  // A model large enough for its states to outweigh the fixed ZeRO buffers 4 to 1.
  const auto wider = [](TrainConfig t) {
    t.model.n_embd = 64;
    t.model.n_layer = 8;
    t.zero.max_live_parameters = 8 * 16416;  // two blocks
    // Buckets of the largest chunk (64 x 256 f32, padded to a multiple of 3 ranks).
    t.zero.reduce_bucket_size = t.zero.allgather_bucket_size = 16416;
    t.zero.prefetch_bucket_size = 16416;
    return t;
  };
  TrainConfig c = wider(offload_config(shard, dir, 3, true));
  c.offload_param = "cpu";
  const RunResult base = train(wider(offload_config(shard, dir, 3, false)), world, kOffloadSteps);
  const RunResult off = train(c, world, kOffloadSteps);
  EXPECT_EQ(differs(off, base), "") << "offload_param on " << N << " ranks";
  size_t peak = 0;
  uint64_t psi = 0;
  {
    Trainer t(c, world);
    const ChunkStore& store = t.model().store();
    psi = static_cast<uint64_t>(store.layout().total_elems());
    t.train_step();
    t.train_step();
    // The host holds master, Adam m, v and the parameter slices: 16 Psi / N bytes.
    EXPECT_EQ(t.host_tier_bytes(), 16 * psi / N);
    // The compute tier: the gradient slices and the ZeRO buffers (gathers among them), no
    // parameter slice.
    EXPECT_EQ(t.compute_allocator()->allocated(),
              store.bytes(ChunkKind::GRAD) + t.engine().comm_buffer_bytes());
    peak = t.compute_allocator()->peak();
  }
  EXPECT_LE(4 * peak, 16 * psi) << "the compute tier's peak " << peak << " is over a quarter of "
                                << "the states' " << 16 * psi << " bytes";
  c.device_memory_limit = static_cast<int64_t>(16 * psi / 4);
  const RunResult budgeted = train(c, world, kOffloadSteps);
  EXPECT_EQ(differs(budgeted, base), "") << "offload_param within 4 Psi bytes";
  // One rank (rank 0 alone): its slice is the whole chunk; the "gather" copies it from the host
  // into a compute-tier buffer, and the compute tier holds no parameter chunk.
  if (world->rank() == 0) {
    TrainConfig one = wider(offload_config(shard, dir, 3, true));
    one.offload_param = "cpu";
    const RunResult plain =
        train(wider(offload_config(shard, dir, 3, false)), nullptr, kOffloadSteps);
    EXPECT_EQ(differs(train(one, nullptr, kOffloadSteps), plain), "")
        << "offload_param on one rank";
    Trainer t(one, nullptr);
    t.train_step();
    const ChunkStore& store = t.model().store();
    const uint64_t psi1 = static_cast<uint64_t>(store.layout().total_elems());
    EXPECT_EQ(t.host_tier_bytes(), 16 * psi1);
    EXPECT_GT(t.engine().comm_buffer_bytes(), 0u) << "nothing was copied into the compute tier";
    EXPECT_EQ(t.compute_allocator()->allocated(),
              store.bytes(ChunkKind::GRAD) + t.engine().comm_buffer_bytes());
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// A sharded checkpoint written with offload resumes (with or without offload) to the same bits
// as the uninterrupted run: the master weights are the saved parameters, Adam's m and v the
// saved optimizer state; the format is the one ZeRO writes.
TEST(Offload, CheckpointsResumeBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const RunResult whole = train(offload_config(shard, dir, 2, true), world, kOffloadSteps);
  std::string ckpt;
  {
    Trainer t(offload_config(shard, dir + "/first", 2, true), world);
    for (int s = 0; s < 3; ++s) t.train_step();
    ckpt = t.save("step3.ckpt");
  }
  for (bool offload : {true, false}) {
    TrainConfig c =
        offload_config(shard, dir + (offload ? "/resumed" : "/resumed_plain"), 2, offload);
    c.resume = ckpt;
    Trainer t(c, world);
    std::vector<float> losses;
    for (int64_t s = 3; s < kOffloadSteps; ++s) losses.push_back(t.train_step().loss);
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_EQ(losses[i], whole.losses[3 + i]) << "step " << 4 + i << " offload " << offload;
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
