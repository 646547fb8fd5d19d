// The memory model end to end: parameter layout, chunks, placement, pipeline in-flight counts.
#include <gtest/gtest.h>

#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/pipeline_inflight.h"

using namespace tide;

namespace {

TrainSetup setup(const char* preset, int world, int tp = 1, int pp = 1) {
  TrainSetup s;
  s.model = GPTConfig::preset(preset);
  s.world_size = world;
  s.tp = tp;
  s.pp = pp;
  return s;
}

int64_t sum_params(const GPTConfig& c, int tp, int pp) {
  int64_t n = 0;
  for (int s = 0; s < pp; ++s)
    for (const ParamTensor& x : stage_param_tensors(c, tp, pp, s)) n += x.elems;
  return n;
}

}  // namespace

TEST(StageParams, AddUpToTheModelsParameterCount) {
  for (const std::string& name : GPTConfig::preset_names()) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_EQ(sum_params(c, 1, 1), c.num_parameters()) << name;
    // Pipelining adds one copy of the tied embedding on the last stage.
    EXPECT_EQ(sum_params(c, 1, 4), c.num_parameters() + int64_t{c.vocab_size} * c.n_embd);
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

TEST(Chunks, PaddingToADivisorOfTheDpDegree) {
  // Three tensors of 10, 6, 6 elements in chunks of 16: [10][6 6] -> 2 chunks; dp 4 -> 4.
  const std::vector<ParamTensor> t = {{"a", 10}, {"b", 6}, {"c", 6}};
  const ChunkPlan p = plan_chunks(t, 16, 4, 2);
  EXPECT_EQ(p.chunk_elems, 16);
  EXPECT_EQ(p.chunks, 2);
  EXPECT_EQ(p.chunks_padded, 4);
  EXPECT_EQ(p.payload_elems, 22);
  EXPECT_EQ(p.owned_chunks(4), 1);
  // Automatic size: the largest tensor rounded up to 16 elements.
  EXPECT_EQ(plan_chunks(t, 0, 1, 2).chunk_elems, 16);
}

TEST(Estimate, SingleGpuDdpIsSixteenBytesPerParameterPlusPaddingAndActivations) {
  TrainSetup s = setup("gpt2-124m", 1);
  const MemoryEstimate e = estimate_memory(s);
  const int64_t psi = s.model.num_parameters();
  EXPECT_EQ(e.device.param16, 2 * psi);
  EXPECT_EQ(e.device.grads, 2 * psi);
  EXPECT_EQ(e.device.optimizer_states(), 12 * psi);
  EXPECT_GE(e.device.chunk_padding, 0);
  // Padding is below one chunk per kind (16 bytes per padded element at most).
  EXPECT_LT(e.device.chunk_padding, 16 * e.stages[0].chunks.chunk_elems);
  EXPECT_GT(e.device.activations, 0);
  EXPECT_EQ(e.device.temp_buffers, 0);  // no chunk groups in flight, nothing recomputed
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
  EXPECT_EQ(off.device.grads, 0);
  EXPECT_EQ(off.device.param16, on_gpu.device.param16);
  EXPECT_EQ(off.host_per_rank.optimizer_states(), on_gpu.device.optimizer_states());
  EXPECT_EQ(off.host_per_rank.grads, on_gpu.device.grads);
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
  EXPECT_EQ(e.device.model_states(), 0);
  EXPECT_EQ(e.device.chunk_padding, 0);
  // Two chunk groups of params being fetched plus two of grads being streamed out.
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
    EXPECT_EQ(inflight_microbatches(Schedule::ZBH1, p, s, m, 1), p - s);
    EXPECT_EQ(inflight_microbatches(Schedule::GPipe, p, s, m, 1), m);
    EXPECT_EQ(inflight_microbatches(Schedule::ZBH2, p, s, m, 1), 2 * (p - s) - 1);
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
