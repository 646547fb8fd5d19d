// The memory estimator and the runtime agree on model states: one config, read by `tide train`
// (parse_train_config) and by `tide estimate` (setup_from_train_config); the chunk store built as
// the Trainer builds it; its allocated bytes against the estimate's model-state bytes.
#include <gtest/gtest.h>

#include <cstdio>

#include "tide/config/config.h"
#include "tide/config/estimate_setup.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/model/gpt.h"
#include "tide/parallel/offload_policy.h"
#include "tide/parallel/zero.h"

using namespace tide;
using json = nlohmann::json;

namespace {

// A small trainable config (f32, AdamW, ZeRO stage 0) with the given chunk_size_mb.
json small_config(double chunk_mb) {
  return {{"model", {{"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"vocab_size", 256}}},
          {"seq_len", 32},
          {"train_micro_batch_size_per_gpu", 4},
          {"chunk_size_mb", chunk_mb}};
}

// The setup `tide estimate --config FILE --world-size dp --zero-stage z` builds.
// (The flags are overrides of world_size and zero_optimization.stage.)
TrainSetup estimate_setup(json config, int dp, int zero_stage) {
  config["world_size"] = dp;
  config["zero_optimization"]["stage"] = zero_stage;
  return setup_from_train_config(parse_train_config(config, /*check_paths=*/false));
}

// Compares the estimate for `s` with the store of `gpt` (one rank of the same setup).
void expect_agree(const TrainSetup& s, const GPT& gpt, const std::string& what) {
  const ChunkStore& store = gpt.store();
  EXPECT_EQ(s.model.num_parameters(), gpt.config().num_parameters()) << what;
  EXPECT_EQ(s.model.max_seq_len, gpt.config().max_seq_len) << what;
  const MemoryEstimate e = estimate_memory(s);
  ASSERT_EQ(e.stages.size(), 1u);
  EXPECT_EQ(e.stages[0].chunks.chunks, store.layout().num_chunks()) << what;
  EXPECT_EQ(e.stages[0].chunks.total_elems, store.layout().total_elems()) << what;
  EXPECT_EQ(e.host.total(), 0) << what;
  const int64_t estimated = e.device.model_states() + e.device.chunk_padding;
  const int64_t allocated = static_cast<int64_t>(store.total_bytes());
  const double ratio = static_cast<double>(estimated) / static_cast<double>(allocated);
  std::printf("%s: %d chunks, estimate %lld bytes, chunk store %lld bytes, ratio %.6f\n",
              what.c_str(), store.layout().num_chunks(), static_cast<long long>(estimated),
              static_cast<long long>(allocated), ratio);
  EXPECT_NEAR(ratio, 1.0, 0.01) << what << ": estimate " << estimated << " vs store " << allocated;
}

// The model of `config` on the last rank of `dp` at ZeRO `stage` (whose slices hold the chunks'
// padding), its store built as the Trainer builds it (Trainer::configure_store: the dtypes
// of bf16 and fp16, DeepSpeed's default gradient dtype).
GPT trainer_model(const json& config, int stage, int dp) {
  const TrainConfig tc = parse_train_config(config);
  ModelOptions o;
  o.chunk_elems = chunk_elems_from_mib(tc.chunk_size_mb);
  o.group_size = dp;
  o.store.group_rank = dp - 1;
  o.store.sliced_kinds = zero_sliced_kinds(stage);
  o.store.compute_dtype = model_dtype(tc);
  if (grad_dtype(tc) != model_dtype(tc)) o.store.grad_dtype = grad_dtype(tc);
  return GPT(tc.model, tc.activation_policy, o);
}

}  // namespace

TEST(EstimateAgreesWithRuntime, DataParallelChunkStore) {
  // 0: automatic (the largest tensor, 16384 elements); 0.02 MiB = 5242 elements, smaller than
  // most matrices (each then gets a chunk of its own); 0.25 MiB = 65536 elements.
  for (double chunk_mb : {0.0, 0.02, 0.25}) {
    for (int dp : {1, 2, 3}) {
      const json config = small_config(chunk_mb);
      const TrainConfig tc = parse_train_config(config);
      // As Trainer builds its model (train/trainer.cpp).
      GPT gpt(tc.model, tc.activation_policy, chunk_elems_from_mib(tc.chunk_size_mb), true, dp);
      const TrainSetup s = estimate_setup(config, dp, tc.zero.stage);
      EXPECT_EQ(s.precision, Precision::FP32);  // neither bf16 nor fp16 enabled, in both
      EXPECT_EQ(s.micro_batch, tc.micro_batch);
      EXPECT_EQ(s.seq(), tc.seq_len);
      expect_agree(s, gpt, fmt::format("stage 0, dp {}, chunk_size_mb {}", dp, chunk_mb));
    }
  }
}

// ZeRO stages 1-3 slice the kinds zero_sliced_kinds() names, as the Trainer builds the store:
// the last rank of the group, whose slices hold the chunks' padding.
TEST(EstimateAgreesWithRuntime, ZeroStagesSliceTheirKinds) {
  for (int stage : {1, 2, 3}) {
    for (double chunk_mb : {0.0, 0.02}) {
      for (int dp : {2, 3}) {
        const json config = small_config(chunk_mb);
        const TrainConfig tc = parse_train_config(config);
        ModelOptions o;
        o.chunk_elems = chunk_elems_from_mib(tc.chunk_size_mb);
        o.group_size = dp;
        o.store.with_optimizer = true;
        o.store.group_rank = dp - 1;
        o.store.sliced_kinds = zero_sliced_kinds(stage);
        GPT gpt(tc.model, tc.activation_policy, o);
        EXPECT_EQ(gpt.store().bytes(ChunkKind::MASTER), 0u);  // f32: the master is the params
        expect_agree(estimate_setup(config, dp, stage), gpt,
                     fmt::format("stage {}, dp {}, chunk_size_mb {}", stage, dp, chunk_mb));
      }
    }
  }
}

// bf16 and fp16 (DeepSpeed's defaults: f32 gradients for bf16 at stage 0, 16-bit otherwise),
// the store built as the Trainer builds it (Trainer::configure_store): model states agree.
TEST(EstimateAgreesWithRuntime, SixteenBitModelStates) {
  for (const char* precision : {"bf16", "fp16"})
    for (int stage : {0, 1, 2, 3})
      for (int dp : {1, 3}) {
        json config = small_config(0.02);
        config[precision] = {{"enabled", true}};
        config["zero_optimization"] = {{"stage", stage}};
        const GPT gpt = trainer_model(config, stage, dp);
        const TrainSetup s = estimate_setup(config, dp, stage);
        EXPECT_EQ(s.precision,
                  std::string(precision) == "bf16" ? Precision::BF16 : Precision::FP16);
        expect_agree(s, gpt, fmt::format("{} stage {}, dp {}", precision, stage, dp));
      }
}

// ZeRO-Offload (stages 1-3, f32 and bf16), the store built as the Trainer builds it (a master
// of its own beside the parameters even in f32: StoreOptions::separate_master) and its
// OffloadPolicy (the f32 host gradient slices): their bytes are the estimate's model states and
// padding, device and host together.
TEST(EstimateAgreesWithRuntime, OffloadModelStates) {
  for (const bool bf16 : {false, true})
    for (int stage : {1, 2, 3})
      for (int dp : {2, 3}) {
        json config = small_config(0.02);
        if (bf16) config["bf16"] = {{"enabled", true}};
        config["zero_optimization"] = {{"stage", stage},
                                       {"offload_optimizer", {{"device", "cpu"}}}};
        const TrainConfig tc = parse_train_config(config);
        ModelOptions o;
        o.chunk_elems = chunk_elems_from_mib(tc.chunk_size_mb);
        o.group_size = dp;
        o.store.with_optimizer = true;
        o.store.separate_master = true;
        o.store.group_rank = dp - 1;
        o.store.sliced_kinds = zero_sliced_kinds(stage);
        o.store.compute_dtype = model_dtype(tc);
        if (grad_dtype(tc) != model_dtype(tc)) o.store.grad_dtype = grad_dtype(tc);
        GPT gpt(tc.model, tc.activation_policy, o);
        HostAllocator host;
        const OffloadPolicy offload(gpt.store(), dp, tc.zero.offload_optimizer, 1, host);
        const MemoryEstimate e = estimate_memory(estimate_setup(config, dp, stage));
        const std::string what =
            fmt::format("{} offload stage {}, dp {}", bf16 ? "bf16" : "f32", stage, dp);
        const int64_t estimated = e.device.model_states() + e.device.chunk_padding +
                                  e.host_per_rank.model_states() + e.host_per_rank.chunk_padding;
        EXPECT_GT(gpt.store().bytes(ChunkKind::MASTER), 0u) << what;
        EXPECT_EQ(estimated,
                  static_cast<int64_t>(gpt.store().total_bytes() + offload.grad_buffer_bytes()))
            << what;
      }
}

// The Llama family (grouped-query attention, an untied head, Qwen2's qkv bias): its tensors
// and chunks, from the same config, in f32 and bf16 at every stage, as the Trainer builds the
// store.
TEST(EstimateAgreesWithRuntime, LlamaModelStates) {
  for (const bool bf16 : {false, true})
    for (int stage : {0, 1, 2, 3})
      for (int dp : {1, 3}) {
        json config = small_config(0.02);
        config["model"].update({{"family", "llama"},
                                {"n_kv_head", 2},
                                {"intermediate_size", 160},
                                {"tie_word_embeddings", false},
                                {"qkv_bias", true}});
        config["bf16"] = {{"enabled", bf16}};
        config["zero_optimization"] = {{"stage", stage}};
        const GPT gpt = trainer_model(config, stage, dp);
        ASSERT_TRUE(gpt.config().is_llama());
        expect_agree(estimate_setup(config, dp, stage), gpt,
                     fmt::format("llama bf16 {} stage {}, dp {}", bf16, stage, dp));
      }
}
