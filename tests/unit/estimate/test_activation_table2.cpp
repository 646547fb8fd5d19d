// Korthikanti et al. (2022) Table 2: activation bytes per transformer layer, 16-bit activations.
// The table's attention core, 5as/h sbh (the softmax output, its dropout and the mask), is what
// tide's attention op does not keep: it keeps each row's log-sum-exp, 4 bytes per (a, s, b)
// split over t, and recomputes the rest in backward (as flash attention). The runtime also keeps
// the norms' f32 statistics, which the table leaves out (GPT-2: 4 sb values, 16 sb bytes,
// replicated like the norms' inputs). Every other term is the table's.
#include <gtest/gtest.h>

#include "tide/estimate/activation_memory.h"

using namespace tide;

namespace {

// GPT-3 175B's layer from the paper's Table 3 (a = 96, h = 12288, s = 2048), t = 8, b = 1.
ActivationShape gpt3(int t, bool sp) {
  ActivationShape x;
  x.s = 2048;
  x.b = 1;
  x.h = 12288;
  x.a = 96;
  x.v = 51200;
  x.t = t;
  x.sp = sp;
  x.elem_bytes = 2;
  return x;
}

// The table's formulas, evaluated in floating point.
double sbh(const ActivationShape& x) {
  return double(x.s) * x.b * x.h;
}
// What the attention op keeps in place of the table's 5as/h sbh: the log-sum-exp, f32.
double lse(const ActivationShape& x) {
  return 4.0 * x.a * x.s * x.b / x.t;
}
// The LayerNorms' means and rstds (f32), split only by sequence parallelism.
double stats(const ActivationShape& x) {
  return 16.0 * x.s * x.b / (x.sp ? x.t : 1);
}

}  // namespace

TEST(KorthikantiTable2, NoParallelism) {
  const ActivationShape x = gpt3(1, false);
  EXPECT_EQ(layer_activation_bytes(x, Recompute::None), sbh(x) * 34 + lse(x) + stats(x));
}

TEST(KorthikantiTable2, TensorParallel) {
  for (int t : {2, 4, 8}) {
    const ActivationShape x = gpt3(t, false);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::None),
              sbh(x) * (10 + 24.0 / t) + lse(x) + stats(x))
        << "t=" << t;
  }
}

TEST(KorthikantiTable2, TensorPlusSequenceParallel) {
  for (int t : {2, 4, 8}) {
    const ActivationShape x = gpt3(t, true);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::None), sbh(x) * 34.0 / t + lse(x) + stats(x))
        << "t=" << t;
  }
}

TEST(KorthikantiTable2, TensorParallelPlusSelectiveRecompute) {
  for (int t : {1, 2, 8}) {
    const ActivationShape x = gpt3(t, false);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Selective), sbh(x) * (10 + 24.0 / t) + stats(x))
        << "t=" << t;
  }
}

TEST(KorthikantiTable2, TensorPlusSequenceParallelPlusSelectiveRecompute) {
  for (int t : {2, 4, 8}) {
    const ActivationShape x = gpt3(t, true);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Selective), sbh(x) * 34.0 / t + stats(x))
        << "t=" << t;
  }
}

TEST(KorthikantiTable2, FullRecomputeKeepsTheLayerInput) {
  for (int t : {1, 8})
    EXPECT_EQ(layer_activation_bytes(gpt3(t, false), Recompute::Full), 2 * sbh(gpt3(t, false)));
  // Under sequence parallelism the kept input is the rank's sequence shard.
  EXPECT_EQ(layer_activation_bytes(gpt3(8, true), Recompute::Full), 2 * sbh(gpt3(8, true)) / 8);
}

TEST(KorthikantiTable2, SequenceParallelPlusSelectiveAgainstTensorParallel) {
  // The paper's headline for GPT-3, TP alone vs TP+SP+selective at t = 8, is over 5x with the
  // attention core kept (13 + 5as/(8h) = 53 sbh against 34/8 sbh); without it, as tide runs,
  // the factor is what SP saves: (10 + 24/8) / (34/8) = 3.06.
  const double tp = layer_activation_bytes(gpt3(8, false), Recompute::None);
  const double both = layer_activation_bytes(gpt3(8, true), Recompute::Selective);
  EXPECT_NEAR(tp / both, 13 / 4.25, 0.01);
}

TEST(KorthikantiTable2, OutputLayerIsFourSbhOverTTimesOnePlusVOverH) {
  // Section 4.3: with SP, the output layer needs 4sbh/t (1 + v/h).
  const ActivationShape x = gpt3(8, true);
  // (+ the final LayerNorm's f32 mean and rstd, sequence-split: 8 sb / t bytes)
  EXPECT_EQ(output_layer_activation_bytes(x),
            4 * sbh(x) / 8 * (1 + double(x.v) / x.h) + 8.0 * x.s * x.b / 8);
  EXPECT_EQ(input_layer_activation_bytes(x), sbh(x) / 8);  // embedding dropout mask
}

TEST(KorthikantiTable2, Fp32ActivationsDoubleEverythingButTheMasksAndTheLse) {
  ActivationShape x = gpt3(1, false);
  x.elem_bytes = 4;
  // 16 sbh elements at 4 bytes + 2 sbh mask bytes; the log-sum-exp is f32 in either precision.
  EXPECT_EQ(layer_activation_bytes(x, Recompute::None), sbh(x) * 66 + lse(x) + stats(x));
  EXPECT_EQ(recompute_workspace_bytes(x, Recompute::Selective), lse(x));
}

TEST(PartitionedActivations, DivideTheFullRecomputeInputByTAndMoveItToTheHost) {
  for (int t : {2, 8}) {
    ActivationShape x = gpt3(t, false);
    x.partition = true;
    // ZeRO-R P_a: the rank's 1/t of the layer input (2sbh bytes at e = 2), plus one whole
    // input per micro-batch and one in the recompute workspace.
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Full), 2 * sbh(x) / t) << "t=" << t;
    EXPECT_EQ(partition_buffer_bytes(x, Recompute::Full), 2 * sbh(x));
    EXPECT_EQ(recompute_workspace_bytes(x, Recompute::Full),
              layer_activation_bytes(gpt3(t, false), Recompute::None) + 2 * sbh(x));
    EXPECT_EQ(host_checkpoint_bytes(x, Recompute::Full), 0);
    x.cpu_checkpointing = true;  // the slices leave the device for the host
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Full), 0) << "t=" << t;
    EXPECT_EQ(host_checkpoint_bytes(x, Recompute::Full), 2 * sbh(x) / t) << "t=" << t;
    EXPECT_EQ(partition_buffer_bytes(x, Recompute::Full), 2 * sbh(x));
  }
  // Without P_a nothing changes, and P_a means nothing without full recompute.
  ActivationShape x = gpt3(8, false);
  EXPECT_EQ(partition_buffer_bytes(x, Recompute::Full), 0);
  x.partition = x.cpu_checkpointing = true;
  EXPECT_EQ(partition_buffer_bytes(x, Recompute::Selective), 0);
  EXPECT_EQ(host_checkpoint_bytes(x, Recompute::Selective), 0);
}

// The Llama family's layer (activation_memory.h), counted from what llama_block.cpp keeps, on
// Llama 3.1 8B's shape (h = 4096, 32 heads over 8 key/value heads, SwiGLU width 14336, no
// dropout) at s = 8192: sbh (8 + 26/t) bytes in bf16 + the f32 log-sum-exp 4as/t and the two
// RMSNorms' f32 rstd 8s, the numbers worked by hand:
// replicated 4 sbh elements (2 bytes each: 8), split Q + K + V + attention output
// (4096 + 2 x 1024 + 4096 = 2.5h) and gate + up + product (3 x 14336 = 10.5h), 13h at 2 bytes.
// The setup's shape is built from the preset, so a family or width lost on the way fails here.
TEST(LlamaLayer, Llama31EightBKeepsEightPlusTwentySixOverTSbh) {
  for (int t : {1, 2, 4, 8}) {
    TrainSetup setup;
    setup.model = GPTConfig::preset("llama3.1-8b");
    setup.seq_len = 8192;
    setup.tp = setup.world_size = t;
    setup.precision = Precision::BF16;
    ActivationShape x = activation_shape(setup);
    const double s = 8192, h = 4096, a = 32;
    EXPECT_EQ(layer_activation_bytes(x, Recompute::None),
              s * h * (8 + 26.0 / t) + 4 * a * s / t + 8 * s)
        << "t=" << t;
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Selective), s * h * (8 + 26.0 / t) + 8 * s) << t;
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Full), 2 * s * h) << "t=" << t;
    // B's temporaries: the SwiGLU product's, the attention output's and q, k, v's gradients.
    EXPECT_EQ(backward_workspace_bytes(x), 2 * s * (14336 + 4096 + 6144) / t) << "t=" << t;
    EXPECT_EQ(input_layer_activation_bytes(x), 0);  // no embedding dropout
    x.sp = t > 1;  // sequence parallelism splits the replicated part too
    EXPECT_EQ(layer_activation_bytes(x, Recompute::Selective), (s * h * 34.0 + 8 * s) / t)
        << "t=" << t;
  }
}

// More ranks than key/value heads (Llama 3.1 8B's 8 over t = 16): each rank holds one kv head,
// replicated over 2 ranks (model/layout.h), so its q, k, v are 256 + 2 x 128 wide, not
// (4096 + 2 x 1024)/16 = 384: the split part per position is q 256 + k, v 256 + the attention
// output 256 + gate, up and product 3 x 896 = 3456 elements, 2 bytes each.
TEST(LlamaLayer, ReplicatedKeyValueHeadsCountOneHeadPerRank) {
  TrainSetup setup;
  setup.model = GPTConfig::preset("llama3.1-8b");
  setup.seq_len = 8192;
  setup.tp = setup.world_size = 16;
  setup.precision = Precision::BF16;
  const ActivationShape x = activation_shape(setup);
  EXPECT_EQ(x.kv, 16 * 128);  // summed over the ranks: one 128-wide head each
  const double s = 8192, h = 4096;
  EXPECT_EQ(layer_activation_bytes(x, Recompute::None),
            s * h * 8 + s * 3456 * 2 + 4 * 32 * s / 16 + 8 * s);
  EXPECT_EQ(layer_activation_bytes(x, Recompute::Selective), s * h * 8 + s * 3456 * 2 + 8 * s);
  // B's temporaries: the SwiGLU product's (896), the attention output's (256) and q, k, v's
  // (512) gradients.
  EXPECT_EQ(backward_workspace_bytes(x), 2 * s * (896 + 256 + 512));
}
