// ZeRO-Offload's bad input at the Engine (the Trainer's refusals are in test_estimate_setup.cpp)
// and the norm partials it sums as chunks arrive (grad_norm_block_sums). Training equivalence,
// traffic and memory are in tests/mpi/train_offload.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "error_of.h"
#include "tide/comm/local_process_group.h"
#include "tide/core/rng.h"
#include "tide/model/gpt.h"
#include "tide/optim/grad_norm.h"
#include "tide/train/config.h"
#include "tide/train/engine.h"

using namespace tide;
using tide::test::error_of;

namespace {

TrainConfig tiny() {
  return parse_train_config(
      {{"model", {{"n_layer", 2}, {"n_embd", 32}, {"n_head", 2}, {"vocab_size", 64}}},
       {"seq_len", 16},
       {"train_micro_batch_size_per_gpu", 2}},
      /*check_paths=*/false);
}

std::string engine_error(int stage, bool separate_master) {
  const TrainConfig tc = tiny();
  ModelOptions o;
  o.store.sliced_kinds = zero_sliced_kinds(stage);
  o.store.separate_master = separate_master;
  GPT gpt(tc.model, tc.activation_policy, o);
  ZeroSettings z;
  z.stage = stage;
  z.offload_optimizer.enabled = true;
  return error_of([&] {
    Engine e(gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(1), 2, 16,
             OptimizerSettings{}, z);
  });
}

TEST(OffloadErrors, StageZeroAndAStoreWithoutItsOwnMasterAreRefused) {
  EXPECT_EQ(engine_error(0, true),
            "zero_optimization.offload_optimizer.device=cpu needs zero_optimization.stage 1, 2 "
            "or 3 (ZeRO-Offload partitions the optimizer state it offloads, as DeepSpeed does); "
            "set zero_optimization.stage to 1 or more");
  EXPECT_EQ(engine_error(1, false),
            "ZeRO-Offload needs the fp32 master weights in their own chunks on the host: build "
            "the model with ModelOptions::store.separate_master = true");
  EXPECT_EQ(engine_error(2, true), "");
}

// Adding every buffer's block sums in buffer order is grad_norm_squared to the bit, whatever
// order the buffers' sums were computed in (the offload thread gets chunks in backward order).
TEST(OffloadNorm, BlockSumsInChunkOrderAreTheGlobalNormBitwise) {
  const int64_t sizes[] = {3 * kNormBlock + 17, 5, kNormBlock, 2 * kNormBlock - 1};
  std::vector<std::vector<float>> data;
  std::vector<GradBuffer> bufs;
  const PhiloxStream rng{3, 4};
  uint64_t k = 0;
  for (int64_t n : sizes) {
    data.emplace_back(n);
    for (float& x : data.back()) x = static_cast<float>(rng.uint(k++) % 20001) * 1e-4f - 1.0f;
  }
  for (const auto& d : data) bufs.push_back({d.data(), DType::F32, static_cast<int64_t>(d.size())});
  std::vector<std::vector<double>> sums(bufs.size());
  for (size_t i = bufs.size(); i-- > 0;) grad_norm_block_sums(bufs[i], sums[i]);
  double total = 0;
  for (const auto& s : sums)
    for (double x : s) total += x;
  const double expected = grad_norm_squared(bufs, 2);
  EXPECT_EQ(std::memcmp(&total, &expected, sizeof(double)), 0) << total << " vs " << expected;
}

}  // namespace
