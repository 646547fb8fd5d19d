// The estimator's ZeRO buffer term against the runtime on 2-8 ranks: `tide estimate`'s
// temp_buffers (no recomputation) must be the bytes ZeroPolicy allocates for its communication
// buffers (Engine::comm_buffer_bytes() after a few steps), since the estimate replays the
// runtime's rules (estimate/zero_buffers.h). Here, not in tests/unit: ZeRO does not run on one
// rank (with one rank a chunk's slice is already whole, so no gradient buffer is attached and
// the reduction's detach fails).
#include <gtest/gtest.h>

#include <omp.h>

#include <cstdio>

#include "mpi_test.h"
#include "tide/config/config.h"
#include "tide/config/estimate_setup.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/exec/engine.h"
#include "tide/model/gpt.h"

using namespace tide;
using json = nlohmann::json;

namespace {

// How far from DeepSpeed's default zero_optimization settings a case goes.
enum class Settings {
  DEFAULTS,
  TIGHT,         // nothing persistent, a reduce bucket of two chunks, a small prefetch window
  TIGHT_FULL,    // TIGHT under full recomputation: B acquires groups 0 1 2 before 3 2 1 0
  SMALL_BUCKET,  // a reduce bucket smaller than every chunk: each reduced alone, at once
};

// A small trainable config (f32, AdamW): 2 layers of 64, vocabulary 256 (the largest tensors,
// wte and the MLP matrices, have 16384 elements; the largest parameter group, the embedding's
// wte + wpe, 18432).
json small_config(double chunk_mb, int stage, int accum, Settings settings) {
  json c = {{"model", {{"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"vocab_size", 256}}},
            {"seq_len", 32},
            {"train_micro_batch_size_per_gpu", 2},
            {"gradient_accumulation_steps", accum},
            {"chunk_size_mb", chunk_mb},
            {"zero_optimization", {{"stage", stage}}}};
  if (settings == Settings::TIGHT || settings == Settings::TIGHT_FULL)
    c["zero_optimization"].update({{"stage3_param_persistence_threshold", 0},
                                   {"reduce_bucket_size", 2 * 18432 + 64},
                                   {"stage3_prefetch_bucket_size", 20000}});
  if (settings == Settings::TIGHT_FULL) c["activation_checkpointing"] = {{"policy", "full"}};
  if (settings == Settings::SMALL_BUCKET)
    c["zero_optimization"].update(
        {{"stage3_param_persistence_threshold", 0}, {"reduce_bucket_size", 1000}});
  return c;
}

// The runtime's buffer bytes after `steps` steps, the store built as the Trainer builds it.
size_t runtime_buffer_bytes(const json& config, std::shared_ptr<ProcessGroup> world, int steps) {
  const TrainConfig tc = parse_train_config(config);
  ModelOptions o;
  o.chunk_elems = chunk_elems_from_mib(tc.chunk_size_mb);
  o.group_size = world->size();
  o.store.group_rank = world->rank();
  o.store.sliced_kinds = zero_sliced_kinds(tc.zero.stage);
  GPT gpt(tc.model, tc.activation_policy, o);
  gpt.init_weights(7);
  OptimizerSettings opt;
  opt.lr.total_num_steps = steps;
  Engine engine(gpt, world, data_parallel_schedule(tc.grad_accum), tc.micro_batch, tc.seq_len, opt,
                zero_settings(tc));
  const int vocab = tc.model.vocab_size, rank = world->rank();
  for (int step = 0; step < steps; ++step)
    engine.step(step, 1, [&](int mb, int32_t* in, int32_t* out) {
      for (int i = 0; i < tc.micro_batch * tc.seq_len; ++i) {
        in[i] = (i * 7 + mb * 3 + step + rank) % vocab;
        out[i] = (i * 5 + mb + 1 + rank) % vocab;
      }
    });
  return engine.comm_buffer_bytes();
}

}  // namespace

// Stages 2 and 3, two chunk sizes (automatic = the largest parameter group; 0.02 MiB = 5242
// elements), one and two micro-batches, each with DeepSpeed's default zero_optimization
// settings and with tight ones; with one micro-batch also tight ones under full recomputation
// and a reduce bucket smaller than every chunk. The defaults (at this size every stage-3 chunk
// is under the persistence threshold and the 500M-element reduce bucket keeps every gradient
// chunk's buffer until the next W or the end of the step) and tight ones (nothing persistent, a
// reduce bucket of two chunks, a prefetch window of part of a block).
TEST(ZeroBuffers, EstimateIsWhatTheRuntimeAllocates) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  omp_set_num_threads(1);  // as the Trainer with threads=1: up to 8 ranks share 2 cores
  int compared = 0;
  for (int stage : {2, 3}) {
    for (double chunk_mb : {0.0, 0.02}) {
      for (auto [accum, settings] :
           {std::pair{1, Settings::DEFAULTS}, std::pair{1, Settings::TIGHT},
            std::pair{2, Settings::DEFAULTS}, std::pair{2, Settings::TIGHT},
            std::pair{1, Settings::TIGHT_FULL}, std::pair{1, Settings::SMALL_BUCKET}}) {
        const json config = small_config(chunk_mb, stage, accum, settings);
        TrainSetup s = setup_from_train_config(parse_train_config(config));
        s.world_size = world->size();
        ASSERT_EQ(s.precision, Precision::FP32);  // as the CPU runtime computes
        const MemoryEstimate e = estimate_memory(s);
        const StageEstimate& st = e.stages[0];
        const size_t runtime = runtime_buffer_bytes(config, world, 2);
        static const char* const kNames[] = {"defaults", "tight", "tight, full recompute",
                                             "reduce bucket under a chunk"};
        const std::string what = fmt::format("stage {}, chunk_size_mb {}, accum {}, {}", stage,
                                             chunk_mb, accum, kNames[static_cast<int>(settings)]);
        if (world->rank() == 0)
          std::printf(
              "N=%d %s: estimate %d buffers (at the peak %d grad + %d param, %d persistent) = "
              "%lld bytes, runtime %zu bytes\n",
              world->size(), what.c_str(), st.comm_buffers.buffers, st.comm_buffers.grad_buffers,
              st.comm_buffers.param_buffers, st.comm_buffers.persistent,
              static_cast<long long>(st.comm_buffers.bytes), runtime);
        EXPECT_GT(runtime, 0u) << what;
        EXPECT_EQ(st.comm_buffers.bytes, static_cast<int64_t>(runtime)) << what;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 24);
}

// communication_data_type=bf16 with f32 gradients: every reduction goes through a staging buffer
// (parallel/comm_staging.h), at every stage: at stage 0 one per chunk (each all-reduce in flight
// to the step's end), at 1-3 one per reduction in flight, returned as each completes. The
// estimate's buffer term (its replay of the same rules) against the runtime's bytes.
TEST(ZeroBuffers, CommunicationStagingIsWhatTheRuntimeAllocates) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  omp_set_num_threads(1);
  int compared = 0;
  for (int stage : {0, 1, 2, 3}) {
    for (auto [accum, settings] : {std::pair{1, Settings::DEFAULTS}, std::pair{2, Settings::TIGHT},
                                   std::pair{1, Settings::SMALL_BUCKET}}) {
      json config = small_config(0.02, stage, accum, settings);
      config["communication_data_type"] = "bf16";
      TrainSetup s = setup_from_train_config(parse_train_config(config));
      s.world_size = world->size();
      const MemoryEstimate e = estimate_memory(s);
      const StageEstimate& st = e.stages[0];
      const size_t runtime = runtime_buffer_bytes(config, world, 2);
      const std::string what =
          fmt::format("stage {}, accum {}, settings {}", stage, accum, static_cast<int>(settings));
      if (world->rank() == 0)
        std::printf("N=%d %s: estimate %d buffers (%d staging) = %lld bytes, runtime %zu bytes\n",
                    world->size(), what.c_str(), st.comm_buffers.buffers, st.comm_buffers.staging,
                    static_cast<long long>(st.comm_buffers.bytes), runtime);
      EXPECT_GT(st.comm_buffers.staging, 0) << what;
      EXPECT_EQ(st.comm_buffers.bytes, static_cast<int64_t>(runtime)) << what;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12);
}
