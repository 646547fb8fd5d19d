// ZeRO-R P_a (partitioned activation checkpoints) and CPU checkpointing under tensor
// parallelism (ModelOptions::partition_activations, ::cpu_checkpointing).
//
// Oracle: the same tensor-parallel model without P_a. P_a changes only where the block inputs
// live between F and B (a 1/t slice per rank, all-gathered before the recomputation), not the
// arithmetic, so losses and every gradient must be bitwise equal, with dropout 0.1, fused and
// deferred W. Memory is measured by the micro-batch's own arenas (mb.saved: the "device"
// activation pool; mb.host_checkpoints: the host pool) as the bytes each extra layer adds
// (models with 2 and 4 layers, so the constant parts cancel), against the unpartitioned run's
// measured bytes: divided by t under P_a, moved wholly to the host pool with CPU checkpointing.
// Communication is measured with the ring algorithm's counters: P_a adds exactly one
// all-gather of the (B,T,C) block input per layer per B, nothing in F or W.

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 24;

GPTConfig tiny_config(int n_layer = 2) {
  GPTConfig c;
  c.n_layer = n_layer;
  c.n_head = 12;  // divides over 2, 3 and 4 ranks
  c.n_embd = 48;
  c.vocab_size = 67;
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

// The tensor-parallel group: the whole world up to 4 ranks, else consecutive groups of 4.
std::shared_ptr<ProcessGroup> tp_group(CommAlgorithm algorithm = CommAlgorithm::Mpi) {
  omp_set_num_threads(1);  // up to 8 ranks share 2 cores
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  if (world->size() <= 4) return world;
  return world->split(world->rank() / 4, world->rank());
}

ModelOptions options(std::shared_ptr<ProcessGroup> tp, bool pa, bool cpu = false) {
  ModelOptions o;
  o.tp = std::move(tp);
  o.partition_activations = pa;
  o.cpu_checkpointing = cpu;
  return o;
}

void fill_batch(MicroBatch& mb, int step) {
  const PhiloxStream rng{77, static_cast<uint64_t>(step)};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    const int32_t token = static_cast<int32_t>(rng.uint(i) % 67);
    mb.tokens.i32()[i] = token;
    mb.targets.i32()[i] = i % 7 == 3 ? -1 : (5 * token + 1) % 67;
  }
  mb.training = true;
  mb.seed = 11;
  mb.step = static_cast<uint64_t>(step);
}

float forward_backward(GPT& m, MicroBatch& mb, bool deferred_w) {
  const float loss = m.forward(mb);
  if (!deferred_w) {
    m.backward(mb);
    return loss;
  }
  for (int i = m.num_blocks() - 1; i >= 0; --i) m.backward_input_block(mb, i);
  for (int i = m.num_blocks() - 1; i >= 0; --i) m.backward_weight_block(mb, i, false);
  return loss;
}

// The first gradient tensor whose bytes differ between a and b ("" when all are equal).
std::string first_different_grad(const GPT& a, const GPT& b) {
  const ChunkLayout& l = a.store().layout();
  for (int id = 0; id < l.num_tensors(); ++id) {
    const Tensor x = a.store().tensor(ChunkKind::GRAD, id),
                 y = b.store().tensor(ChunkKind::GRAD, id);
    if (std::memcmp(x.data, y.data, x.nbytes()) != 0) return l.slot(id).name;
  }
  return "";
}

TEST(PartitionActivations, LossAndGradientsBitwiseEqualToTensorParallelWithout) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const GPTConfig cfg = tiny_config();
  GPT ref(cfg, ActivationPolicy::FULL, options(tp, false));
  ref.init_weights(3);
  for (bool cpu : {false, true}) {
    GPT pa(cfg, ActivationPolicy::FULL, options(tp, true, cpu));
    ASSERT_TRUE(pa.partition_activations());
    pa.init_weights(3);
    for (bool deferred : {false, true}) {
      // Deferred W: a stash slot for every block between its B and its W.
      StashPool pool_ref(ref.stash_slot_bytes(kB, kT), ref.num_blocks());
      StashPool pool_pa(pa.stash_slot_bytes(kB, kT), pa.num_blocks());
      auto mb_ref = ref.make_micro_batch(kB, kT, &pool_ref);
      auto mb_pa = pa.make_micro_batch(kB, kT, &pool_pa);
      for (int step = 1; step <= 2; ++step) {  // the second forward reuses the pools
        fill_batch(*mb_ref, step);
        fill_batch(*mb_pa, step);
        ref.store().zero(ChunkKind::GRAD, ref.op());
        pa.store().zero(ChunkKind::GRAD, pa.op());
        const float loss_ref = forward_backward(ref, *mb_ref, deferred);
        const float loss_pa = forward_backward(pa, *mb_pa, deferred);
        EXPECT_EQ(loss_pa, loss_ref) << "cpu " << cpu << " deferred " << deferred;
        EXPECT_EQ(first_different_grad(pa, ref), "")
            << "cpu " << cpu << " deferred " << deferred << " step " << step;
      }
    }
  }
}

// Pipeline stages (pp = 2, 2 layers each, run in sequence on every rank): each stage's
// residual buffers ping-pong, so its output_activation shares memory with its first block's
// input, which only P_a's slice keeps. Losses and both stages' gradients bitwise as without P_a.
struct StagedRun {
  float loss = 0;
  std::vector<std::vector<float>> grads;
};
StagedRun staged(const std::shared_ptr<ProcessGroup>& tp, bool pa, bool cpu) {
  const GPTConfig cfg = tiny_config(4);
  std::vector<std::unique_ptr<GPT>> stages;
  std::vector<std::unique_ptr<MicroBatch>> mbs;
  for (int st = 0; st < 2; ++st) {
    ModelOptions o = options(tp, pa, cpu);
    o.pp = 2;
    o.stage = st;
    stages.push_back(std::make_unique<GPT>(cfg, ActivationPolicy::FULL, o));
    stages.back()->init_weights(7);
    stages.back()->store().zero(ChunkKind::GRAD, stages.back()->op());
    mbs.push_back(stages.back()->make_micro_batch(kB, kT));
    fill_batch(*mbs.back(), 1);
  }
  auto copy = [](Tensor dst, Tensor src) { std::memcpy(dst.data, src.data, src.nbytes()); };
  stages[0]->forward(*mbs[0]);
  copy(stages[1]->input_activation(*mbs[1]), stages[0]->output_activation(*mbs[0]));
  StagedRun r;
  r.loss = stages[1]->forward(*mbs[1]);
  stages[1]->backward(*mbs[1]);
  copy(stages[0]->residual_grad(*mbs[0]), stages[1]->residual_grad(*mbs[1]));
  stages[0]->backward(*mbs[0]);
  for (auto& m : stages)
    for (int id = 0; id < m->store().layout().num_tensors(); ++id) {
      const Tensor g = m->store().tensor(ChunkKind::GRAD, id);
      r.grads.emplace_back(g.f32(), g.f32() + g.numel());
    }
  return r;
}

TEST(PartitionActivations, PipelineStagesBitwiseEqualToTensorParallelWithout) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const StagedRun ref = staged(tp, false, false);
  for (bool cpu : {false, true}) {
    const StagedRun got = staged(tp, true, cpu);
    EXPECT_EQ(got.loss, ref.loss) << "cpu " << cpu;
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    for (size_t i = 0; i < ref.grads.size(); ++i)
      EXPECT_TRUE(std::memcmp(got.grads[i].data(), ref.grads[i].data(), ref.grads[i].size() * 4) ==
                  0)
          << "cpu " << cpu << ", gradient tensor " << i;
  }
}

// Measured pool bytes after one training forward + backward of a model with `layers` layers.
struct Pools {
  double device = 0, host = 0;
};
Pools measure(const std::shared_ptr<ProcessGroup>& tp, int layers, bool pa, bool cpu) {
  GPT m(tiny_config(layers), ActivationPolicy::FULL, options(tp, pa, cpu));
  m.init_weights(1);
  auto mb = m.make_micro_batch(kB, kT);
  fill_batch(*mb, 1);
  forward_backward(m, *mb, false);
  return {static_cast<double>(mb->saved.peak()), static_cast<double>(mb->host_checkpoints.peak())};
}

TEST(PartitionActivations, SavedBlockInputBytesDividedByTAndMovedToTheHostPool) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const int t = tp->size();
  // Per layer: the difference between 4 and 2 layers, halved.
  auto per_layer = [&](bool pa, bool cpu) {
    const Pools a = measure(tp, 2, pa, cpu), b = measure(tp, 4, pa, cpu);
    return Pools{(b.device - a.device) / 2, (b.host - a.host) / 2};
  };
  const Pools base = per_layer(false, false), pa = per_layer(true, false),
              cpu = per_layer(true, true);
  // Unpartitioned, the full policy keeps each block's whole (B,T,C) f32 input: 4sbh bytes.
  EXPECT_EQ(base.device, 4.0 * kB * kT * tiny_config().n_embd);
  EXPECT_EQ(base.host, 0.0);
  EXPECT_EQ(pa.device * t, base.device);  // P_a: 1/t of it, still in the device pool
  EXPECT_EQ(pa.host, 0.0);
  EXPECT_EQ(cpu.device, 0.0);            // CPU checkpointing: none left in the device pool ...
  EXPECT_EQ(cpu.host * t, base.device);  // ... all in the host pool
  // Whole micro-batches (4 layers): the device pool drops by exactly what the host pool holds.
  const Pools whole_pa = measure(tp, 4, true, false), whole_cpu = measure(tp, 4, true, true);
  EXPECT_EQ(whole_pa.device - whole_cpu.device, whole_cpu.host);
  EXPECT_EQ(whole_cpu.host, 4 * base.device / t);
  const Pools whole_base = measure(tp, 4, false, false);
  if (tp->rank() == 0)
    std::printf(
        "{\"t\": %d, \"layers\": 4, \"per_layer_block_input_bytes\": {\"tp\": %.0f, \"pa\": %.0f, "
        "\"pa_cpu_device\": %.0f, \"pa_cpu_host\": %.0f}, \"micro_batch_saved_bytes\": {\"tp\": "
        "%.0f, \"pa\": %.0f, \"pa_cpu_device\": %.0f, \"pa_cpu_host\": %.0f}}\n",
        t, base.device, pa.device, cpu.device, cpu.host, whole_base.device, whole_pa.device,
        whole_cpu.device, whole_cpu.host);
}

// Bytes each transformer block's F, B and W send, measured by the ring counters.
struct LayerTraffic {
  std::vector<uint64_t> fwd, bwd, wgt;
};
LayerTraffic traffic(const std::shared_ptr<ProcessGroup>& tp, bool pa) {
  GPT m(tiny_config(), ActivationPolicy::FULL, options(tp, pa));
  m.init_weights(1);
  auto mb = m.make_micro_batch(kB, kT);
  fill_batch(*mb, 1);
  auto sent = [&] {
    const uint64_t b = tp->counters().bytes_sent;
    tp->reset_counters();
    return b;
  };
  LayerTraffic out{std::vector<uint64_t>(m.num_blocks()), std::vector<uint64_t>(m.num_blocks()),
                   std::vector<uint64_t>(m.num_blocks())};
  tp->reset_counters();
  for (int i = 0; i < m.num_blocks(); ++i) {
    m.forward_block(*mb, i);
    out.fwd[i] = sent();
  }
  for (int i = m.num_blocks() - 1; i >= 0; --i) {
    m.backward_input_block(*mb, i);
    out.bwd[i] = sent();
    m.backward_weight_block(*mb, i, false);
    out.wgt[i] = sent();
  }
  return out;
}

TEST(PartitionActivations, AddsOneAllGatherOfTheBlockInputPerLayerPerBackward) {
  if (mpi_test::world().size() > 4) GTEST_SKIP() << "one tp group of the whole world (<= 4)";
  const std::shared_ptr<ProcessGroup> tp = tp_group(CommAlgorithm::Ring);
  const int t = tp->size();
  const int64_t act = int64_t{kB} * kT * tiny_config().n_embd;  // (B,T,C) elements
  const uint64_t gather = 4 * ring_all_gather_traffic(act / t, t).sent;
  ASSERT_GT(gather, 0u);
  const LayerTraffic base = traffic(tp, false), pa = traffic(tp, true);
  const int L = tiny_config().n_layer;
  for (int i = 0; i < L + 2; ++i) {
    const bool layer = i >= 1 && i <= L;
    EXPECT_EQ(pa.fwd[i], base.fwd[i]) << "block " << i;
    EXPECT_EQ(pa.bwd[i], base.bwd[i] + (layer ? gather : 0u)) << "block " << i;
    EXPECT_EQ(pa.wgt[i], base.wgt[i]) << "block " << i;
  }
  if (tp->rank() == 0)
    std::printf(
        "{\"t\": %d, \"pa_backward_bytes_per_layer_added\": %llu, \"tp_layer_bytes\": %llu}\n", t,
        static_cast<unsigned long long>(pa.bwd[1] - base.bwd[1]),
        static_cast<unsigned long long>(base.fwd[1] + base.bwd[1]));
}

// Bad input: rejected when the model is built, naming the fix.
void expect_error(const ModelOptions& o, ActivationPolicy policy, const std::string& needle) {
  try {
    GPT m(tiny_config(), policy, o);
    FAIL() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PartitionActivationsBadInput, WithoutTheFullRecomputePolicy) {
  for (ActivationPolicy p : {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE})
    expect_error(options(tp_group(), true), p, "use 'full'");
}

TEST(PartitionActivationsBadInput, WithoutTensorParallelism) {
  expect_error(options(nullptr, true), ActivationPolicy::FULL, "tensor-parallel group");
}

TEST(PartitionActivationsBadInput, UnderSequenceParallelism) {
  ModelOptions o = options(tp_group(), true);
  o.sequence_parallel = true;
  expect_error(o, ActivationPolicy::FULL, "already");
}

TEST(PartitionActivationsBadInput, CpuCheckpointingWithoutPartitioning) {
  expect_error(options(tp_group(), false, true), ActivationPolicy::FULL,
               "needs partition_activations");
}

}  // namespace
