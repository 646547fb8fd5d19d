// The tensor_parallel.* and activation_checkpointing.partition_activations / cpu_checkpointing
// keys: every bad combination is one clear line naming the key and the fix, at config time
// (load_train_config, before a Trainer exists or anything is written; `tide estimate` reads
// the same keys). What depends on the ranks launched is in TrainerRefuses
// (test_estimate_setup.cpp).
#include <gtest/gtest.h>

#include "error_of.h"
#include "tide/config/config.h"
#include "tide/config/estimate_setup.h"

using namespace tide;
using tide::test::error_of;

namespace {

// The config's error ("" when it parses): model n_head 12, n_embd 48, seq_len 24 unless
// overridden (later overrides win).
std::string tp_config_error(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"model.n_head=12", "model.n_embd=48", "seq_len=24"});
  return error_of([&] { load_train_config("", overrides); });
}

}  // namespace

TEST(TensorParallelConfig, GoodSettingsParseAndReachTheEstimate) {
  const TrainConfig c =
      load_train_config("", {"model.n_head=12", "model.n_embd=48", "seq_len=24", "world_size=4",
                             "tensor_parallel.size=4", "tensor_parallel.sequence_parallel=true"});
  EXPECT_EQ(c.tensor_parallel, 4);
  EXPECT_TRUE(c.sequence_parallel);
  const TrainSetup s = setup_from_train_config(c);  // tide estimate reads the same keys
  EXPECT_EQ(s.tp, 4);
  EXPECT_TRUE(s.sp);
  const TrainConfig pa =
      load_train_config("", {"tensor_parallel.size=2", "activation_checkpointing.policy=full",
                             "activation_checkpointing.partition_activations=true",
                             "activation_checkpointing.cpu_checkpointing=true"});
  EXPECT_TRUE(pa.partition_activations);
  EXPECT_TRUE(pa.cpu_checkpointing);
  EXPECT_EQ(tp_config_error({"tensor_parallel.size=3"}), "");  // 12 heads, 48 wide: 3 divides
}

TEST(TensorParallelConfig, SequenceParallelWithoutTensorParallelism) {
  EXPECT_EQ(tp_config_error({"tensor_parallel.sequence_parallel=true"}),
            "tensor_parallel.sequence_parallel=true shards the sequence over the "
            "tensor-parallel ranks, and tensor_parallel.size is 1; set tensor_parallel.size to "
            "2 or more, or sequence_parallel to false");
}

TEST(TensorParallelConfig, HiddenSizeNotDivisible) {
  EXPECT_EQ(tp_config_error({"model.n_head=6", "model.n_embd=30", "tensor_parallel.size=4"}),
            "model.n_embd (30) is not divisible by tensor_parallel.size (4): the hidden size is "
            "split evenly over the tensor-parallel ranks; choose a size that divides 30");
}

TEST(TensorParallelConfig, HeadsNotDivisible) {
  EXPECT_EQ(tp_config_error({"model.n_head=6", "tensor_parallel.size=4"}),  // 48 divides, 6 not
            "model.n_head (6) is not divisible by tensor_parallel.size (4): each "
            "tensor-parallel rank computes n_head/size whole heads; choose a size that divides "
            "6");
}

TEST(TensorParallelConfig, SeqLenNotDivisibleUnderSequenceParallelism) {
  EXPECT_EQ(tp_config_error({"seq_len=22", "tensor_parallel.size=4"}), "");  // fine without SP
  EXPECT_EQ(tp_config_error(
                {"seq_len=22", "tensor_parallel.size=4", "tensor_parallel.sequence_parallel=true"}),
            "seq_len (22) is not divisible by tensor_parallel.size (4) under "
            "tensor_parallel.sequence_parallel, which gives each rank seq_len/size positions; "
            "use a multiple of 4 or turn sequence_parallel off");
}

TEST(TensorParallelConfig, VocabularyThatLeavesTheLastRankNoRowAfterPadding) {
  EXPECT_EQ(tp_config_error({"model.vocab_size=10", "tensor_parallel.size=4"}), "");  // 3,3,3,1
  EXPECT_EQ(tp_config_error({"model.vocab_size=5", "tensor_parallel.size=4"}),        // 2,2,1,0
            "model.vocab_size (5) padded to a multiple of tensor_parallel.size (4) gives 2 rows "
            "per rank and leaves the last rank no real row; use a smaller tensor_parallel.size");
}

TEST(TensorParallelConfig, PartitionActivationsNeedsTheFullPolicy) {
  EXPECT_EQ(tp_config_error({"tensor_parallel.size=2", "activation_checkpointing.policy=selective",
                             "activation_checkpointing.partition_activations=true"}),
            "activation_checkpointing.partition_activations partitions the block inputs that "
            "the full recompute policy keeps, and activation_checkpointing.policy is "
            "'selective'; set the policy to full, or partition_activations to false");
}

TEST(TensorParallelConfig, PartitionActivationsNeedsTensorParallelism) {
  EXPECT_EQ(tp_config_error({"activation_checkpointing.policy=full",
                             "activation_checkpointing.partition_activations=true"}),
            "activation_checkpointing.partition_activations slices the block inputs over the "
            "tensor-parallel ranks, and tensor_parallel.size is 1; set tensor_parallel.size to "
            "2 or more, or partition_activations to false");
}

TEST(TensorParallelConfig, PartitionActivationsWithSequenceParallelism) {
  EXPECT_EQ(tp_config_error({"tensor_parallel.size=2", "tensor_parallel.sequence_parallel=true",
                             "activation_checkpointing.policy=full",
                             "activation_checkpointing.partition_activations=true"}),
            "activation_checkpointing.partition_activations with "
            "tensor_parallel.sequence_parallel: the block inputs are already 1/2 sequence "
            "shards, nothing more to partition; turn one of them off");
}

TEST(TensorParallelConfig, CpuCheckpointingNeedsPartitionActivations) {
  EXPECT_EQ(tp_config_error({"tensor_parallel.size=2", "activation_checkpointing.policy=full",
                             "activation_checkpointing.cpu_checkpointing=true"}),
            "activation_checkpointing.cpu_checkpointing moves the partitioned block inputs to "
            "host memory and needs activation_checkpointing.partition_activations=true; turn it "
            "on, or cpu_checkpointing off");
}
