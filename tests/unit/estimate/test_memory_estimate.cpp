// The memory model end to end: parameter layout, chunks, placement, pipeline in-flight counts.
#include <gtest/gtest.h>

#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/pipeline_inflight.h"

using namespace tide;

namespace {

TrainSetup setup(const char* preset, int world, int tp = 1, int pp = 1) {
  TrainSetup s;
  s.model = GPTConfig::preset(preset);
  // ZeRO's Table 1 counts 16-bit gradients at every stage; DeepSpeed's default for bf16 at
  // stage 0 is f32 (default_grad_dtype), so the key is given.
  s.grad_precision = Precision::BF16;
  s.world_size = world;
  s.tp = tp;
  s.pp = pp;
  return s;
}

// Parameters of one tp rank, summed over the pipeline stages, as the estimate counts them.
int64_t sum_params(const GPTConfig& c, int tp, int pp) {
  TrainSetup s;
  s.model = c;
  s.world_size = tp * pp;
  s.tp = tp;
  s.pp = pp;
  int64_t n = 0;
  for (const StageEstimate& st : estimate_memory(s).stages) n += st.params;
  return n;
}

}  // namespace

TEST(StageParams, AddUpToTheModelsParameterCount) {
  for (const std::string& name : GPTConfig::preset_names()) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_EQ(sum_params(c, 1, 1), c.num_parameters()) << name;
    // Pipelining adds one copy of a tied embedding on the last stage (an untied Llama head is
    // its own tensor there).
    const int64_t copy = c.tie_word_embeddings ? int64_t{c.vocab_size} * c.n_embd : 0;
    EXPECT_EQ(sum_params(c, 1, 4), c.num_parameters() + copy) << name;
  }
}

TEST(StageParams, TensorParallelSplitsMatricesNotNormsOrRowParallelBiases) {
  const GPTConfig c = GPTConfig::preset("gpt2-350m");  // L 24, C 1024, V 50257
  const int64_t C = c.n_embd, L = c.n_layer;
  const int64_t vocab_rows = (c.vocab_size + 3) / 4;
  // Per layer: 12C^2/t + 9C/t... split: QKV (3C^2 + 3C), proj C^2, fc (4C^2 + 4C), fc proj 4C^2;
  // replicated: 2 norms (4C), 2 row-parallel biases (2C).
  const int64_t per_layer = (12 * C * C + 7 * C) / 4 + 6 * C;
  EXPECT_EQ(sum_params(c, 4, 1), vocab_rows * C + c.max_seq_len * C + L * per_layer + 2 * C);
}

TEST(Chunks, TheStagesLayoutAsTheChunkStorePacksIt) {
  // GPT-2 124M over 64 ranks, automatic chunk size: the largest packing unit (an op's
  // parameter group, model/param_groups.h), here the embedding's wte + wpe (50257 x 768 +
  // 1024 x 768). A layer's groups are ln_1 + c_attn (3C^2 + 5C), attn.c_proj (C^2 + C), ln_2 +
  // c_fc (4C^2 + 6C) and mlp.c_proj (4C^2 + C); a chunk takes whole groups while they fit:
  // [wte wpe] [h.0-4, h.5 g0-g1] [h.5 g2-g3, h.6-9, h.10 g0-g2] [h.10 g3, h.11] [ln_f], the
  // head's ln_f in a chunk of its own, each rounded up to 16 x 64 elements.
  TrainSetup s = setup("gpt2-124m", 64);
  const ChunkPlan p = estimate_memory(s).stages[0].chunks;
  const int64_t C = 768, wte = 50257 * C, wpe = 1024 * C, layer = 12 * C * C + 13 * C;
  const int64_t g[4] = {3 * C * C + 5 * C, C * C + C, 4 * C * C + 6 * C, 4 * C * C + C};
  const auto round = [](int64_t n) { return (n + 1023) / 1024 * 1024; };
  EXPECT_EQ(p.target_elems, wte + wpe);
  EXPECT_EQ(p.chunks, 5);
  EXPECT_EQ(p.largest_chunk_elems, round(wte + wpe));
  EXPECT_EQ(p.total_elems, round(wte + wpe) + round(5 * layer + g[0] + g[1]) +
                               round(g[2] + g[3] + 4 * layer + g[0] + g[1] + g[2]) +
                               round(g[3] + layer) + round(2 * C));
  EXPECT_EQ(p.payload_elems, s.model.num_parameters());
  EXPECT_EQ(p.owned_elems * 64, p.total_elems);  // every chunk sliced, no padding chunks
}

TEST(Chunks, ATensorLargerThanTheTargetGetsAChunkOfItsOwn) {
  // chunk_size_mb 64 = 16M f32 elements; wte of GPT-2 1.5B is 50257 x 1600 = 80.4M. This used
  // to be an error (a fixed chunk size had to hold the largest tensor); chunks now fit their
  // payload, so wte simply has a chunk of its own.
  TrainSetup s = setup("gpt2-1.5b", 8);
  s.chunk_mib = 64;
  const MemoryEstimate e = estimate_memory(s);
  const ChunkPlan& p = e.stages[0].chunks;
  EXPECT_EQ(p.target_elems, 16 << 20);
  EXPECT_EQ(p.largest_chunk_elems, (int64_t{50257} * 1600 + 127) / 128 * 128);
  // Each of the 48 layers (30.7M elements) is larger than the target too: wte's chunk plus at
  // least one per layer.
  EXPECT_GE(p.chunks, 49);
  // Padding: under 16 x 8 elements per chunk (the rounding that lets 8 ranks slice it), at
  // 16 bytes per element (bf16 + Adam).
  EXPECT_LT(e.device.chunk_padding, p.chunks * 16 * 8 * 16);
}

TEST(Estimate, SingleGpuDdpIsSixteenBytesPerParameterPlusPaddingAndActivations) {
  TrainSetup s = setup("gpt2-124m", 1);
  const MemoryEstimate e = estimate_memory(s);
  const int64_t psi = s.model.num_parameters();
  EXPECT_EQ(e.device.param16, 2 * psi);
  EXPECT_EQ(e.device.grads, 2 * psi);
  EXPECT_EQ(e.device.optimizer_states(), 12 * psi);
  EXPECT_GE(e.device.chunk_padding, 0);
  // Padding is only each chunk's rounding to 16 elements (at most 16 bytes each per parameter),
  // plus the 64-byte rounding of each 16-bit chunk.
  const int64_t chunks = e.stages[0].chunks.chunks;
  EXPECT_LT(e.device.chunk_padding, chunks * (16 * 16 + 2 * 64));
  EXPECT_GT(e.device.activations, 0);
  // No ZeRO buffers, nothing recomputed: temp is the backward's op temporaries, the gradients
  // of the MLP hidden (4 sbh) and of the attention output (sbh), bf16.
  EXPECT_EQ(e.device.temp_buffers, 5 * int64_t{s.micro_batch} * 1024 * 768 * 2);
  EXPECT_EQ(e.host.total(), 0);
}

TEST(Estimate, ZeroStagesOnlyEverShrinkModelStates) {
  TrainSetup s = setup("gpt2-774m", 16);
  int64_t previous = INT64_MAX;
  for (int stage = 0; stage <= 3; ++stage) {
    s.zero_stage = stage;
    const MemoryEstimate e = estimate_memory(s);
    EXPECT_LT(e.device.model_states(), previous) << "stage " << stage;
    previous = e.device.model_states();
  }
}

TEST(Estimate, OffloadOptimizerMovesMasterAndAdamStatesToTheHost) {
  TrainSetup s = setup("gpt2-1.5b", 8);
  s.zero_stage = 2;
  const MemoryEstimate on_gpu = estimate_memory(s);
  s.offload = Offload::Optimizer;
  const MemoryEstimate off = estimate_memory(s);
  EXPECT_EQ(off.device.optimizer_states(), 0);
  // The reduced slices stay on the GPU, and go down into f32 host buffers for the CPU Adam
  // (OffloadPolicy; twice the bytes of the bf16 slices, as DeepSpeed's CPU Adam reads f32).
  EXPECT_EQ(off.device.grads, on_gpu.device.grads);
  EXPECT_EQ(off.device.param16, on_gpu.device.param16);
  EXPECT_EQ(off.host_per_rank.optimizer_states(), on_gpu.device.optimizer_states());
  EXPECT_EQ(off.host_per_rank.grads, 2 * on_gpu.device.grads);
  // One host holds the partitions of its 8 ranks.
  EXPECT_EQ(off.ranks_per_host, 8);
  EXPECT_EQ(off.host.total(), 8 * off.host_per_rank.total());
  EXPECT_LT(off.device.total(), on_gpu.device.total());
}

TEST(Estimate, OffloadAllKeepsNoParametersOnTheDevice) {
  TrainSetup s = setup("gpt2-1.5b", 8);
  s.zero_stage = 3;
  s.offload = Offload::All;
  const MemoryEstimate e = estimate_memory(s);
  // Only the reduced gradient slices (stage 3) stay on the device.
  EXPECT_EQ(e.device.model_states(), e.device.grads);
  EXPECT_EQ(e.device.grads, (s.model.num_parameters() + 7) / 8 * 2);
  // The same whole-chunk communication buffers as without offload (zero_buffers.h).
  EXPECT_GT(e.device.temp_buffers, 0);
  EXPECT_EQ(e.host_per_rank.param16, (s.model.num_parameters() + 7) / 8 * 2);
}

TEST(Estimate, RecomputeShrinksActivationsButNeedsAWorkspace) {
  TrainSetup s = setup("gpt2-350m", 1);
  s.micro_batch = 8;
  const int64_t none = estimate_memory(s).device.activations;
  s.recompute = Recompute::Selective;
  const MemoryEstimate sel = estimate_memory(s);
  s.recompute = Recompute::Full;
  const MemoryEstimate full = estimate_memory(s);
  EXPECT_LT(sel.device.activations, none);
  EXPECT_LT(full.device.activations, sel.device.activations);
  EXPECT_GT(full.device.temp_buffers, sel.device.temp_buffers);
  EXPECT_GT(sel.device.temp_buffers, 0);
}

TEST(Pipeline, InflightMicrobatchesBySchedule) {
  const int p = 4, m = 8;
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(inflight_microbatches(Schedule::OneFOneB, p, s, m, 1), p - s);
    EXPECT_EQ(inflight_microbatches(Schedule::ZBH1, p, s, m, 1), p);  // W deferred: until W
    EXPECT_EQ(inflight_microbatches(Schedule::GPipe, p, s, m, 1), m);
    EXPECT_EQ(inflight_microbatches(Schedule::ZBH2, p, s, m, 1), 2 * p - 1);
  }
  EXPECT_EQ(inflight_microbatches(Schedule::OneFOneB, p, 0, 2, 1), 2);  // fewer micro-batches
  EXPECT_EQ(inflight_microbatches(Schedule::GPipe, 1, 0, m, 1), 1);     // no pipeline
  // Interleaved: the first stage holds L(1 + (p-1)/(pv)) layers' worth (Korthikanti 4.2.3):
  // with L/p = 8 layers per stage, v = 2: 32 * (1 + 3/8) = 44 layer-micro-batches.
  EXPECT_EQ(inflight_layer_microbatches(Schedule::Interleaved, p, 0, m, 2, 8), 44);
  // 1F1B first stage: p micro-batches of L/p layers = L.
  EXPECT_EQ(inflight_layer_microbatches(Schedule::OneFOneB, p, 0, m, 1, 8), 32);
}

TEST(Pipeline, FirstStageOfOneFOneBIsThePeak) {
  TrainSetup s = setup("gpt2-1.5b", 8, 1, 4);
  s.grad_accum = 8;
  s.micro_batch = 4;
  const MemoryEstimate e = estimate_memory(s);
  ASSERT_EQ(e.stages.size(), 4u);
  EXPECT_EQ(e.peak_stage, 0);
  EXPECT_EQ(e.stages[0].inflight_microbatches, 4);
  EXPECT_EQ(e.stages[3].inflight_microbatches, 1);
  EXPECT_EQ(e.stages[1].layers, 12);
  s.schedule = Schedule::ZBH2;
  EXPECT_GT(estimate_memory(s).device.activations, e.device.activations);
}
